"""Run control end to end on provider:local: the real trainer (tiny model, offline) in a detached worker. A run is
followed through its log, stopped cooperatively (a checkpoint saved, state stopped, collected), continued exactly
from that checkpoint by a prepare-resume plan, and ends where the same run uninterrupted ends; cancel terminates."""
from __future__ import annotations

import json
import time

import pytest

from stateset_agents import runs
from stateset_agents.cli import main
from stateset_agents.plugin_api.checkpoints import read_receipts, safetensors_digest, verify_receipts
from stateset_agents.remote import config as cfg
from stateset_agents.remote import session, state

STEPS = 12


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from tests.helpers.toy_rewards import build_tiny_model

    path = tmp_path_factory.mktemp("tiny")
    build_tiny_model(path)
    return path


def _config(tmp_path, tiny_model, **extra):
    from tests.helpers.toy_rewards import make_rows, write_rows

    data = write_rows(tmp_path / "curated.jsonl", make_rows())
    return cfg.validated({"provider": "local", "dataset": str(data), "base_model": str(tiny_model),
                          "algorithm": "sft", "reward": "gsm8k", "max_cost_usd": 1, "max_hours": 0.5,
                          "training": {"steps": STEPS, "batch_size": 2, "max_new_tokens": 4, "save_every": 1,
                                       "keep_checkpoints": 50}, **extra})


def _metrics(run_dir):
    rows = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines() if r.strip()]
    return [(r["step"], round(r["loss"], 6)) for r in rows]


def test_stop_then_exact_continuation_ends_where_the_uninterrupted_run_ends(tiny_model, tmp_path, capsys):
    full = _config(tmp_path, tiny_model)
    with session.open_provider("local") as provider:
        plan = session.prepare(full, tmp_path / "ws", provider)
        run_id = plan["run_id"]
        session.launch(tmp_path / "ws", provider, output=tmp_path / "runs" / "parent")
        seen = []
        for event in runs.logs(run_id, follow=True, provider=provider, poll_s=0.05):
            seen.append(event["type"])
            if event["type"] == "checkpoint":  # stop it through the CLI: it waits, collects, reports the checkpoint
                capsys.readouterr()
                assert main(["finetune", "stop", run_id]) == 0
                break
        said = capsys.readouterr().out
        assert "log" in seen and state.load_record(run_id)["phase"] == "stopped"
        table = runs.checkpoints(run_id)
        k = table[-1]["step"]
        assert 1 <= k < STEPS and table[-1]["complete"]
        assert f"stopped {run_id}; checkpoint step {k}: {k} committed updates" in said
        assert f"prepare-resume {run_id} --checkpoint {k}" in said
        assert [r["outcome"] for r in state.read_ledger()] == ["stopped"]
        # the whole log, read after the fact, ends with the interruption the stop asked for
        events = list(runs.logs(run_id, provider=provider))
        assert events[-1]["type"] == "failed" and events[-1]["reason"] == "interrupted"
        assert main(["finetune", "logs", run_id, "--json"]) == 0
        assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == events
        assert main(["finetune", "status", run_id]) == 0
        assert f"stopped {run_id} at checkpoint step {k}" in capsys.readouterr().err
        status = runs.status(run_id, provider=provider)
        assert status["phase"] == "stopped" and status["stop_requested"] and status["quarantined"] is None
        assert status["job"]["state"] == "stopped" and [c["step"] for c in status["checkpoints"]][-1] == k

        child = runs.prepare_resume(run_id, k, tmp_path / "child-ws", "exact", provider=provider)
        assert child["resume"]["checkpoint_step"] == k and child["max_cost_usd"] == 1.0
        session.launch(tmp_path / "child-ws", provider, output=tmp_path / "runs" / "child")
        done = session.watch(child["run_id"], provider, poll_s=0.2)
        assert done["phase"] == "collected", done.get("error")

        alone = session.prepare(_config(tmp_path, tiny_model, salt="uninterrupted"), tmp_path / "alone-ws", provider)
        session.launch(tmp_path / "alone-ws", provider, output=tmp_path / "runs" / "alone")
        assert session.watch(alone["run_id"], provider, poll_s=0.2)["phase"] == "collected"

    parent_dir, child_dir, alone_dir = (tmp_path / "runs" / n for n in ("parent", "child", "alone"))
    manifest = json.loads((child_dir / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["committed_updates"] == STEPS
    # the child continued from step K: its history up to K is the parent's, and the whole run is the uninterrupted one
    assert _metrics(child_dir)[:k] == _metrics(parent_dir)[:k]
    assert _metrics(child_dir) == _metrics(alone_dir) and len(_metrics(alone_dir)) == STEPS
    digest = lambda d: safetensors_digest(d / "adapter" / "adapter_model.safetensors")  # noqa: E731
    assert digest(child_dir) == digest(alone_dir)
    receipts = {d: [(r["step"], r.get("update_sha256")) for r in read_receipts(d) if r.get("committed")]
                for d in (child_dir, alone_dir)}
    # every committed update's receipt (its update digest) is the uninterrupted run's, and the chain verifies
    assert len(receipts[alone_dir]) == STEPS and receipts[child_dir] == receipts[alone_dir]
    assert verify_receipts(child_dir, manifest) == []
    # lineage: the child's record and its run's provenance name the parent and the checkpoint; the parent its child
    provenance = json.loads((child_dir / "resumed_from.json").read_text())
    assert provenance == {"mode": "exact", "parent_run_id": run_id, "checkpoint_step": k,
                          "checkpoint_sha256": child["resume"]["checkpoint_sha256"]}
    assert json.loads((child_dir / "remote_receipt.json").read_text())["resume"]["parent_run_id"] == run_id
    assert [c["run_id"] for c in state.load_record(run_id)["children"]] == [child["run_id"]]
    capsys.readouterr()
    assert main(["finetune", "list", "--json"]) == 0
    listed = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed[child["run_id"]]["resume"]["parent_run_id"] == run_id and listed[run_id]["phase"] == "stopped"
    assert main(["finetune", "checkpoints", run_id]) == 0
    out = capsys.readouterr().out
    assert f"step {k}: {k} committed updates" in out and "complete" in out
    assert main(["finetune", "prepare-resume", run_id, "--checkpoint", str(k), "--workspace",
                 str(tmp_path / "again"), "--mode", "exact", "--max-cost", "2"]) == 2
    assert "add --raise-cap" in capsys.readouterr().err


def test_cancel_terminates_and_books_the_spend(tiny_model, tmp_path, capsys):
    full = _config(tmp_path, tiny_model, training={"steps": 500, "batch_size": 2, "max_new_tokens": 4})
    with session.open_provider("local") as provider:
        plan = session.prepare(full, tmp_path / "ws", provider)
        session.launch(tmp_path / "ws", provider)
        job = state.state_dir() / "local" / "jobs" / plan["run_id"]
        for _ in range(400):
            if (job / "status.json").exists():
                break
            time.sleep(0.05)
    assert main(["finetune", "cancel", plan["run_id"]]) == 0
    assert f"cancelled {plan['run_id']}" in capsys.readouterr().out
    assert state.load_record(plan["run_id"])["phase"] == "cancelled"
    assert [r["outcome"] for r in state.read_ledger()] == ["cancelled"]
    assert main(["finetune", "stop", plan["run_id"]]) == 2  # over already: nothing to stop


def test_a_run_quarantined_while_it_trains_ends_failed_never_succeeded(tiny_model, tmp_path):
    full = _config(tmp_path, tiny_model)
    with session.open_provider("local") as provider:
        plan = session.prepare(full, tmp_path / "ws", provider)
        session.launch(tmp_path / "ws", provider, output=tmp_path / "runs" / "q")
        run = state.state_dir() / "local" / "jobs" / plan["run_id"] / "run"
        for event in runs.logs(plan["run_id"], follow=True, provider=provider, poll_s=0.05):
            if event["type"] == "checkpoint" and not (run / "quarantine.json").exists():
                # what the trainer writes after a partial update; the worker must not report the run completed
                (run / "quarantine.json").write_text(json.dumps({"reason": "partial_update", "step": event["step"],
                                                                 "message": "injected by the test"}))
        final = provider.status(plan["run_id"])
        assert final["state"] == "failed" and final["quarantined"]["reason"] == "partial_update"
        record = session.finish(plan["run_id"], provider, final, 0.0)
    assert record["phase"] == "failed" and "quarantined: partial_update" in record["error"]
    assert not (tmp_path / "runs" / "q" / "manifest.json").exists()  # nothing collected as if it had succeeded
