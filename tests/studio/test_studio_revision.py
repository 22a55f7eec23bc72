"""The base model's hub revision (issue 22: "a hub id with revision", "model revision when supplied"): refused in the
form beside a local path or when it is no git ref; recorded in the plan (so in its run id and checksum); and, on a
real local run of the tiny model served from an offline hub cache at one commit, loaded with
from_pretrained(revision=...) and recorded in the run's manifest."""
from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from stateset_agents.remote.plan import load_verified
from stateset_agents.studio import actions
from stateset_agents.studio.app import StudioApp
from tests.studio.studio_helpers import text, write_config

SHA = "0123456789abcdef0123456789abcdef01234567"
REPO = "stateset-test/tiny"


def test_the_form_refuses_a_revision_it_cannot_load(workspace, tiny_model_dir):
    asyncio.run(_form(workspace, str(tiny_model_dir)))


async def _form(ws, local_model):
    write_config(ws, provider="local", algorithm="sft", reward="customer_support", max_cost_usd=1)
    app = StudioApp(ws)
    async with app.run_test(size=(100, 40)) as pilot:
        assert app.use_dataset("improve") is True
        for model, revision, said in ((local_model, "main", "a revision applies to a hub id; base_model "),
                                      ("", SHA, "a revision needs base_model, a hub id"),
                                      (REPO, "bad..ref", "'bad..ref' is not a git ref or commit sha"),
                                      (REPO, "-x", "does not match")):
            app.query_one("#cfg-base_model").value = model
            app.query_one("#cfg-base_model_revision").value = revision
            await pilot.press("ctrl+r")
            await pilot.pause()
            assert said in text(app, "#err-base_model_revision"), (model, revision)
            assert app.plan is None and app.query_one("#tabs").active == "configure"
    assert not (ws / "studio" / "plans").exists() or not any((ws / "studio" / "plans").iterdir())


@pytest.fixture()
def hub_repo(tmp_path, tiny_model_dir, monkeypatch):
    """The tiny model as an offline hub cache holds a repo at commit SHA, while its main branch points at a commit
    the cache lacks: only from_pretrained(REPO, revision=SHA) loads it (HF_HUB_OFFLINE=1, read by the worker)."""
    repo = tmp_path / "hub" / ("models--" + REPO.replace("/", "--"))
    shutil.copytree(tiny_model_dir, repo / "snapshots" / SHA)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("f" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return repo


def test_the_revision_is_in_the_plan_and_the_run_manifest(workspace, hub_repo):
    pytest.importorskip("torch")
    config = {"provider": "local", "algorithm": "sft", "reward": "customer_support", "max_cost_usd": 1,
              "max_hours": 0.5, "dataset": str(workspace / "improve" / "curated.jsonl"), "base_model": REPO,
              "training": {"batch_size": 2, "max_prompt_tokens": 96, "steps": 1, "save_every": 1},
              "eval": {"max_new_tokens": 4}}
    assert actions.validate({**config, "base_model_revision": SHA}) == []
    unpinned = actions.prepare(config, workspace)
    plan = actions.prepare({**config, "base_model_revision": SHA}, workspace)
    on_disk = json.loads((Path(plan["_workspace"]) / "plan.json").read_text())
    assert on_disk["config"]["base_model_revision"] == SHA and load_verified(plan["_workspace"])["run_id"] == plan["run_id"]
    assert plan["run_id"] != unpinned["run_id"] and plan["checksum"] != unpinned["checksum"]  # another model

    actions.launch(Path(plan["_workspace"]), workspace)
    done = actions.follow(plan["run_id"], poll_s=0.2)
    manifests = list((workspace / "studio" / "runs" / plan["run_id"]).rglob("manifest.json"))
    assert manifests, done
    base = json.loads(manifests[0].read_text())["base_model"]
    assert {k: base[k] for k in ("source", "id", "requested_revision")} == {"source": "hub", "id": REPO,
                                                                            "requested_revision": SHA}
