"""Run control without a real job: prepare-resume's refusals and its plan, the unconfirmed launch, --new-run beside
a live sibling, stop without a cooperative provider, logs following, and the worker's stop/quarantine states and
HTTP front. A small in-test provider stands in where a real job is not needed."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from stateset_agents import runs
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import sha256_file
from stateset_agents.plugin_api.jobs import STOP_FILE
from stateset_agents.remote import session, state, worker

from .fakes import ClientDied, TableProvider, write_checkpoint

BASE = "org/tiny-model"


def _config(tmp_path: Path, **extra) -> dict:
    data = tmp_path / "curated.jsonl"
    data.write_text(json.dumps({"prompt": [{"role": "user", "content": "hi"}],
                                "completion": [{"role": "assistant", "content": "hello"}]}) + "\n")
    return {"provider": "local", "dataset": str(data), "base_model": BASE, "algorithm": "sft", "max_cost_usd": 10,
            "max_hours": 1, "training": {"steps": 4}, **extra}


def _stopped_parent(tmp_path: Path, provider, *, spent: float = 2.0, phase: str = "stopped", **ckpt) -> dict:
    """A parent run as `finetune stop` leaves it: recorded stopped, its checkpoints collected into its output."""
    ws = tmp_path / "parent-ws"
    plan = session.prepare(_config(tmp_path), ws, provider)
    out = tmp_path / "runs" / "parent"
    write_checkpoint(out, 2, dataset_sha256=ckpt.pop("dataset_sha256", plan["inputs"]["dataset"]["sha256"]),
                     base_model=ckpt.pop("base_model", BASE), **ckpt)
    (out / "remote_receipt.json").write_text(json.dumps({"run_id": plan["run_id"], "state": "stopped"}))
    state.save_record({"run_id": plan["run_id"], "provider": "local", "workspace": str(ws), "output": str(out),
                       "plan_checksum": plan["checksum"], "max_cost_usd": 10.0, "phase": phase,
                       "spend_usd": spent, "job": {"job_id": "job-0"}})
    return plan


# ------------------------------------------------------------------------------------------- prepare-resume
def test_exact_continuation_plan_carries_the_checkpoint_and_links_parent_and_child(tmp_path):
    provider = TableProvider()
    parent = _stopped_parent(tmp_path, provider)
    child_ws = tmp_path / "child"
    plan = runs.prepare_resume(parent["run_id"], 2, child_ws, "exact", provider=provider)
    assert plan["_mode_name"] == "exact continuation" and plan["run_id"] != parent["run_id"]
    assert plan["max_cost_usd"] == 8.0 and "remaining budget" in plan["_cap_source"]  # 10 cap less 2 spent
    ckpt = tmp_path / "runs" / "parent" / "checkpoints" / "step-000002"
    assert plan["resume"] == {"mode": "exact", "parent_run_id": parent["run_id"], "checkpoint_step": 2,
                              "checkpoint_sha256": sha256_file(ckpt / "adapter" / "adapter_model.safetensors")}
    # the checkpoint travels in the workspace snapshot, every file an input the plan's checksum binds
    carried = {k: v for k, v in plan["inputs"].items() if k.startswith("resume/")}
    assert len(carried) == 4 and (child_ws / "resume" / "step-000002" / "state.json").is_file()
    assert session.load_verified(child_ws)["config"]["training"] == parent["config"]["training"]
    children = state.load_record(parent["run_id"])["children"]
    assert [(c["run_id"], c["mode"], c["checkpoint_step"]) for c in children] == [(plan["run_id"], "exact", 2)]
    # the worker places it where the trainer resumes from, and asks for resume
    job = tmp_path / "job"
    job.mkdir()
    for ident in plan["inputs"].values():
        (job / ident["file"]).parent.mkdir(parents=True, exist_ok=True)
        (job / ident["file"]).write_bytes((child_ws / ident["file"]).read_bytes())
    config = json.loads((child_ws / "config.json").read_text())
    worker.place_resume(job, config)
    assert (job / "run" / "checkpoints" / "step-000002" / "training_state.pt").is_file()
    assert worker.request_for(job, config)["resume"] is True
    assert json.loads((job / "run" / worker.PROVENANCE_FILE).read_text())["parent_run_id"] == parent["run_id"]


def test_weights_only_starts_from_the_checkpoint_adapter_and_same_settings_takes_no_checkpoint(tmp_path):
    provider = TableProvider()
    parent = _stopped_parent(tmp_path, provider, learner_state=("adapter",))  # weights suffice here
    plan = runs.prepare_resume(parent["run_id"], 2, tmp_path / "w", "weights", provider=provider)
    config = json.loads((tmp_path / "w" / "config.json").read_text())
    request = worker.request_for(tmp_path / "job", config)
    assert plan["_mode_name"] == "weights only" and "resume" not in request
    assert request["init_adapter"].endswith("resume/step-000002/adapter")
    with pytest.raises(InputError, match="same settings starts from the base model"):
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "s", "same-settings", provider=provider)
    same = runs.prepare_resume(parent["run_id"], None, tmp_path / "s", "same-settings", provider=provider)
    assert same["_mode_name"] == "same settings" and not any(k.startswith("resume/") for k in same["inputs"])
    assert len({plan["run_id"], same["run_id"], parent["run_id"]}) == 3
    with pytest.raises(InputError, match="exact continuation"):
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "x", "continue", provider=provider)


def test_exact_refuses_an_incomplete_checkpoint_and_never_falls_back(tmp_path):
    provider = TableProvider()
    parent = _stopped_parent(tmp_path, provider, learner_state=("adapter", "optimizer"))
    with pytest.raises(InputError, match="not complete.*scheduler") as err:
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "c", "exact", provider=provider)
    assert "state.json" in str(err.value) and not (tmp_path / "c" / "plan.json").exists()
    # a file changed after it was written: its sha256 no longer matches
    (tmp_path / "runs" / "parent" / "checkpoints" / "step-000002" / "training_state.pt").write_bytes(b"edited")
    with pytest.raises(InputError, match="training_state.pt sha256 differs"):
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "c", "weights", provider=provider)
    with pytest.raises(InputError, match="no checkpoint at step 7 .*\\[2\\]"):
        runs.prepare_resume(parent["run_id"], 7, tmp_path / "c", "exact", provider=provider)


def test_exact_refuses_another_model_or_dataset(tmp_path):
    provider = TableProvider()
    parent = _stopped_parent(tmp_path, provider, dataset_sha256="f" * 64, base_model="org/other")
    with pytest.raises(InputError) as err:
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "c", "exact", provider=provider)
    assert "dataset sha256 ffffffffffff" in str(err.value) and "base model" in str(err.value)


def test_exact_refuses_other_trainer_code(tmp_path):
    provider = TableProvider()
    parent = _stopped_parent(tmp_path, provider)
    newer = TableProvider()
    newer.quote = lambda plan: {**TableProvider.quote(newer, plan), "image": {"name": "t", "digest": "sha256:" + "1" * 64}}
    with pytest.raises(InputError, match="trainer code: the image is now sha256:1111"):
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "c", "exact", provider=newer)


def test_exact_refuses_a_parent_that_is_not_stopped(tmp_path):
    provider = TableProvider()
    parent = _stopped_parent(tmp_path, provider, phase="collected")
    with pytest.raises(InputError, match="is collected, not stopped"):
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "c", "exact", provider=provider)
    assert runs.prepare_resume(parent["run_id"], 2, tmp_path / "w", "weights", provider=provider)["run_id"]


def test_budget_refusals_and_the_explicit_raise(tmp_path):
    provider = TableProvider()
    parent = _stopped_parent(tmp_path, provider, spent=10.0)
    with pytest.raises(InputError, match="no budget remains: .* spent \\$10.0000 of its \\$10.00 cap"):
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "c", "exact", provider=provider)
    state.update_record(parent["run_id"], spend_usd=7.0)
    with pytest.raises(InputError, match="--max-cost \\$5.00 is above the parent's remaining budget \\$3.0000"):
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "c", "exact", max_cost=5, provider=provider)
    raised = runs.prepare_resume(parent["run_id"], 2, tmp_path / "c", "exact", max_cost=5, raise_cap=True,
                                 provider=provider)
    assert raised["max_cost_usd"] == 5 and "raised above" in raised["_cap_source"]
    # the child's worst case must fit its cap (1 h at $1/h here), like any plan
    state.update_record(parent["run_id"], spend_usd=9.5)
    with pytest.raises(StatesetError, match="worst case is above --max-cost \\$0.50"):
        runs.prepare_resume(parent["run_id"], 2, tmp_path / "d", "exact", provider=provider)


# --------------------------------------------------------------------------------------- unconfirmed launch
def test_a_client_that_died_after_the_provider_created_the_job_never_gets_a_second_one(tmp_path):
    provider = TableProvider()
    ws = tmp_path / "ws"
    plan = session.prepare(_config(tmp_path), ws, provider)
    provider.die_after_create = True
    with pytest.raises(ClientDied):
        session.launch(ws, provider)
    record = state.load_record(plan["run_id"])
    assert record["phase"] == "launching" and record["plan_checksum"] == plan["checksum"]
    # prepare of the same job finds the existing job and says so
    again = session.prepare(_config(tmp_path), tmp_path / "ws2", provider)
    assert again["_notice"] == f"found the existing job job-1 for run {plan['run_id']} (its launch was not confirmed)"
    record = session.launch(ws, provider)
    assert provider.creates == 1 and record["phase"] == "running" and record["job"]["job_id"] == "job-1"


def test_an_unconfirmed_launch_whose_job_never_appeared_launches_once(tmp_path):
    provider = TableProvider()
    ws = tmp_path / "ws"
    plan = session.prepare(_config(tmp_path), ws, provider)
    state.save_record({"run_id": plan["run_id"], "phase": "launching", "provider": "local",
                       "plan_checksum": plan["checksum"]})  # the client died before the provider heard of it
    record = session.launch(ws, provider)
    assert provider.creates == 1 and record["phase"] == "running" and not record.get("notice")


def test_new_run_is_refused_beside_an_unconfirmed_or_live_sibling(tmp_path):
    provider = TableProvider()
    ws = tmp_path / "ws"
    plan = session.prepare(_config(tmp_path), ws, provider)
    provider.die_after_create = True
    with pytest.raises(ClientDied):
        session.launch(ws, provider)
    with pytest.raises(InputError, match=f"refusing --new-run: run {plan['run_id']} of the same job exists"):
        session.prepare(_config(tmp_path, salt="abc"), tmp_path / "new", provider)
    assert state.load_record(plan["run_id"])["phase"] == "running"  # the unconfirmed launch found its job
    with pytest.raises(InputError, match="its job job-1 may still be running; follow it with `train-remote --attach"):
        session.prepare(_config(tmp_path, salt="abc"), tmp_path / "new", provider)
    provider.jobs[plan["run_id"]]["state"] = "succeeded"  # over, though no client collected it yet
    fresh = session.prepare(_config(tmp_path, salt="abc"), tmp_path / "new", provider)
    assert fresh["run_id"] != plan["run_id"] and fresh["job_identity"] == plan["job_identity"]


# ------------------------------------------------------------------------------------------------ stop, logs
def test_stop_on_a_provider_without_it_points_to_cancel(tmp_path):
    provider = TableProvider(cooperative=False)
    ws = tmp_path / "ws"
    plan = session.prepare(_config(tmp_path), ws, provider)
    session.launch(ws, provider)
    with pytest.raises(StatesetError, match=f"local cannot stop a run cooperatively; `finetune cancel {plan['run_id']}`"):
        runs.stop(plan["run_id"], provider=provider)
    done = runs.cancel(plan["run_id"], provider=provider)
    assert done["phase"] == "cancelled" and provider.jobs[plan["run_id"]]["state"] == "terminated"
    assert [r["outcome"] for r in state.read_ledger()] == ["cancelled"] and done["spend_usd"] == round(1 / 60, 6)


def test_logs_follow_reads_split_lines_until_the_job_ends(tmp_path):
    provider = TableProvider()
    ws = tmp_path / "ws"
    plan = session.prepare(_config(tmp_path), ws, provider)
    session.launch(ws, provider)
    lines = [{"type": "log", "message": "loading"}, {"type": "progress", "step": 1}]
    provider.log = b"".join(json.dumps(e).encode() + b"\n" for e in lines)
    ticks = []

    def sleep(_):  # the job writes one more event, then ends
        ticks.append(1)
        if len(ticks) == 1:
            provider.log += b'{"type": "completed"}\n'
        else:
            provider.jobs[plan["run_id"]]["state"] = "succeeded"

    got = list(runs.logs(plan["run_id"], follow=True, provider=provider, sleep=sleep, poll_s=0))
    assert got == lines + [{"type": "completed"}]
    assert list(runs.logs(plan["run_id"], offset=len(provider.log) - 22, provider=provider)) == [{"type": "completed"}]


def test_checkpoints_and_status_come_from_the_provider_until_the_run_is_collected(tmp_path):
    provider = TableProvider()
    ws = tmp_path / "ws"
    plan = session.prepare(_config(tmp_path), ws, provider)
    session.launch(ws, provider)
    row = {"step": 1, "committed_updates": 1, "path": "checkpoints/step-000001", "sha256": "a" * 64,
           "complete": True, "missing": [], "validation": {"mean": 0.5, "split": "validation"}}
    provider.status = lambda run_id: {**TableProvider.status(provider, run_id), "checkpoints": [row],
                                      "quarantined": {"reason": "partial_update"}, "stop_requested": True}
    assert runs.checkpoints(plan["run_id"], provider=provider) == [row]
    report = runs.status(plan["run_id"], provider=provider)
    assert report["checkpoints"] == [row] and report["quarantined"] == {"reason": "partial_update"}
    assert report["stop_requested"] and report["phase"] == "running"
    assert [r["run_id"] for r in runs.list()] == [plan["run_id"]]


# ---------------------------------------------------------------------------------------------------- worker
def test_worker_final_states(tmp_path):
    job = tmp_path / "job"
    (job / "run").mkdir(parents=True)
    interrupted = {"type": "failed", "reason": "interrupted", "message": "stopped after 2 of 4 updates"}
    assert worker.final_state(job, interrupted, True)[0] == "stopped"
    assert worker.final_state(job, interrupted, False)[0] == "failed"  # the deadline, not a stop
    assert worker.final_state(job, {"type": "completed"}, False)[0] == "succeeded"
    (job / "run" / "quarantine.json").write_text(json.dumps({"reason": "partial_update", "message": "boom"}))
    assert worker.final_state(job, {"type": "completed"}, False) == ("failed", "quarantined: partial_update")
    (job / "run" / "quarantine.json").write_text("[1]")  # unreadable: still quarantined, never succeeded
    assert worker.final_state(job, {"type": "completed"}, False)[0] == "failed"


def test_pod_front_serves_logs_and_stop_to_its_token_only(tmp_path):
    import socket

    job = tmp_path / "job"
    (job / "run").mkdir(parents=True)
    (job / "events.jsonl").write_bytes(b'{"type": "log"}\n{"type": "progress"}\n')
    (job / "status.json").write_text(json.dumps({"state": "running"}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = worker.serve_files(job, "tok", port, host="127.0.0.1")
    base = f"http://127.0.0.1:{port}"

    def call(path, method="GET", token="tok"):
        req = urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None,
                                     headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    try:
        assert call("/logs", token="wrong")[0] == 401 and call("/stop", "POST", token="wrong")[0] == 401
        assert not (job / STOP_FILE).exists()
        assert call("/logs?offset=16") == (200, b'{"type": "progress"}\n')
        assert call("/logs?offset=16&length=3") == (200, b'{"t')
        code, body = call("/logs?offset=-1")
        assert code == 400 and b"offset must be a non-negative integer" in body
        assert call("/logs?offset=999") == (200, b"")
        assert call("/stop", "POST") == (200, b'{"requested":true}\n') and (job / STOP_FILE).exists()
        (job / "status.json").write_text(json.dumps({"state": "stopped"}))
        assert call("/stop", "POST") == (200, b'{"requested":false}\n')
    finally:
        server.shutdown()


def test_the_cli_says_it_found_the_job_of_an_unconfirmed_launch(tmp_path, monkeypatch, capsys):
    """`finetune prepare` and `finetune launch` print the notice, and the launch attaches: one job, not two."""
    from stateset_agents.cli import main

    provider = TableProvider()
    monkeypatch.setattr(session, "open_provider", lambda name, config=None: provider)
    config = tmp_path / "job.json"
    config.write_text(json.dumps(_config(tmp_path)))
    ws = tmp_path / "ws"
    assert main(["finetune", "prepare", "--config", str(config), "--workspace", str(ws)]) == 0
    provider.die_after_create = True
    with pytest.raises(ClientDied):
        session.launch(ws, provider)
    capsys.readouterr()
    assert main(["finetune", "prepare", "--config", str(config), "--workspace", str(tmp_path / "ws2")]) == 0
    assert "found the existing job job-1" in " ".join(capsys.readouterr().err.split())
    assert main(["finetune", "launch", str(ws), "--detach"]) == 0
    assert provider.creates == 1
