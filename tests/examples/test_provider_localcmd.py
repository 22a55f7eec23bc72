"""examples/stateset-provider-localcmd: a third party's provider, installed with pip, that `train-remote` runs jobs
through under the cost cap, with no kernel edit."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from stateset_agents.cli import main

from .conftest import installed

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def _remote_config(tmp_path: Path, **provider_config) -> Path:
    path = tmp_path / "remote.yaml"
    path.write_text(json.dumps({"provider_config": provider_config,
                                "training": {"steps": 1, "batch_size": 2, "num_generations": 2, "max_new_tokens": 4,
                                             "save_every": 1}}))
    return path


def test_train_remote_through_the_example_provider_under_the_cap(tiny_model_dir, curated, held_out, tmp_path,
                                                                 state_dir, capsys):
    """The Done-when run: a real training job through the provider's command, priced at 0.5 USD an hour, collected
    with checked artifacts and booked under the cap; the objective is the other example's (a third party's trainer
    on a third party's provider: one RLOO update on the tiny model)."""
    installed("provider:localcmd", "stateset-provider-localcmd")
    installed("trainer:rloo", "stateset-trainer-rloo")
    out = tmp_path / "runs" / "r1"
    argv = ["train-remote", "--provider", "localcmd", "--dataset", str(curated), "--base-model", str(tiny_model_dir),
            "--eval-prompts", str(held_out), "--max-cost", "1", "--max-hours", "0.5", "--algorithm", "rloo",
            "--reward", "gsm8k", "--config", str(_remote_config(tmp_path, usd_per_hour=0.5)), "--output", str(out)]
    assert main(argv) == 0, capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["committed_updates"] == 1
    assert (out / "adapter" / "adapter_model.safetensors").exists()
    receipt = json.loads((out / "remote_receipt.json").read_text())
    assert receipt["provider"] == "localcmd" and 0 < receipt["spend_usd"] <= 1
    from stateset_agents.remote import state

    [booked] = state.read_ledger()
    assert booked["outcome"] == "collected" and booked["provider"] == "localcmd"
    assert 0 < booked["spend_usd"] <= booked["max_cost_usd"] == 1
    job = state_dir / "localcmd" / "jobs" / receipt["run_id"]
    assert json.loads((job / "exit.json").read_text())["reason"] == "exited"


def test_a_worst_case_above_the_cap_is_refused_before_anything_runs(curated, tmp_path, state_dir, capsys):
    argv = ["train-remote", "--provider", "localcmd", "--dataset", str(curated), "--max-cost", "0.1",
            "--max-hours", "0.5", "--config", str(_remote_config(tmp_path, usd_per_hour=0.5))]
    assert main(argv) == 4
    err = " ".join(capsys.readouterr().err.split())
    assert "worst case is above --max-cost $0.10" in err and "$0.5000/GPU-hour x 1 x 0.5 h" in err
    assert not (state_dir / "localcmd").exists()


def _plan(tmp_path: Path, run_id: str, *, max_cost: float, max_hours: float) -> dict:
    from stateset_agents.plugin_api import jobs

    workspace = tmp_path / f"ws-{run_id}"
    workspace.mkdir(exist_ok=True)
    plan = {"run_id": run_id, "max_cost_usd": max_cost, "max_hours": max_hours, "gpu": {"id": "cpu", "count": 1},
            "inputs": {}}
    (workspace / "plan.json").write_text(json.dumps(plan))
    (workspace / "config.json").write_text("{}")
    return {**plan, "bundle": jobs.bundle(workspace, plan)}


def _wait_for(provider, run_id: str, states: tuple[str, ...], seconds: float = 60) -> dict:
    end = time.time() + seconds
    while time.time() < end:
        status = provider.status(run_id)
        if status["state"] in states:
            return status
        time.sleep(0.1)
    raise AssertionError(f"{run_id} never reached {states}: {status}")


def _gone(pid: int, within: float = 10.0) -> bool:
    """The process has exited within `within` seconds (a loaded machine reaps a killed child late). A zombie has
    exited: it waits only for its parent (this process, whose last status poll may have come just before the end)."""
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        except FileNotFoundError:  # gone between the two looks (or no /proc: then only os.kill can tell)
            if Path("/proc").is_dir():
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def test_the_job_itself_stops_where_its_spend_reaches_the_cap(tmp_path):
    """Nobody watches: at 3600 USD an hour (1 USD a second) a cap of 13 USD leaves 3 seconds once the kill's
    grace (10 s) is kept back; the supervisor stops the command there, and the job reports it and its spend."""
    from stateset_agents.core.runtimes import load_component

    with load_component("provider:localcmd", config={"command": SLEEPER, "usd_per_hour": 3600.0}) as provider:
        started = provider.launch(_plan(tmp_path, "sa-capped-job", max_cost=13.0, max_hours=1.0))
        assert started["deadline_at"] - started["created_at"] == pytest.approx(3.0, abs=0.01)
        assert provider.launch(_plan(tmp_path, "sa-capped-job", max_cost=13.0, max_hours=1.0))["attached"]
        assert _wait_for(provider, "sa-capped-job", ("running",))["state"] == "running"
        final = _wait_for(provider, "sa-capped-job", ("terminated", "failed", "succeeded"))
    assert final["state"] == "terminated" and "deadline" in final["message"]
    assert 3.0 <= final["uptime_s"] < 13.0 and final["spend_usd"] < 13.0
    pid = json.loads((Path(os.environ["STATESET_AGENTS_STATE_DIR"]) / "localcmd" / "jobs" / "sa-capped-job" /
                      "process.json").read_text())["pid"]
    assert _gone(pid)


def test_the_kernels_watchdog_terminates_the_job_before_the_cap(curated, tmp_path):
    """The kernel's side of the cap, through the provider out of process: quote, plan, launch, and a watchdog that
    terminates the (never-ending) job before its spend, plus a termination's worth, would pass the cap."""
    from stateset_agents.remote import session, state
    from stateset_agents.core.runtimes import load_component

    config = {"provider": "localcmd", "dataset": str(curated), "max_cost_usd": 66.5, "max_hours": 66 / 3600,
              "provider_config": {"command": SLEEPER, "usd_per_hour": 3600.0}}
    with load_component("provider:localcmd", config=config["provider_config"], runtime="subprocess") as provider:
        plan = session.prepare(config, tmp_path / "ws", provider)
        record = session.launch(tmp_path / "ws", provider, output=tmp_path / "out")
        done = session.watch(record["run_id"], provider, poll_s=0.2)
        assert provider.status(plan["run_id"])["state"] == "terminated"
    assert done["phase"] == "capped" and done["final"]["stopped_by"] == "cap"
    assert done["spend_usd"] <= 66.5
    assert [r["outcome"] for r in state.read_ledger()] == ["capped"]


def test_terminate_stops_the_whole_job_and_reports_it(tmp_path):
    from stateset_agents.core.runtimes import load_component

    with load_component("provider:localcmd", config={"command": SLEEPER}) as provider:
        provider.launch(_plan(tmp_path, "sa-stopped", max_cost=1.0, max_hours=1.0))
        _wait_for(provider, "sa-stopped", ("running",))
        assert provider.terminate("sa-stopped")["terminated"] is True
        status = provider.status("sa-stopped")
        assert status["state"] == "terminated" and status["spend_usd"] == 0.0
        assert provider.terminate("sa-stopped")["terminated"] is False
        assert [j["run_id"] for j in provider.list_jobs()] == ["sa-stopped"]
        assert provider.artifacts({"run_id": "sa-stopped"})["files"] == []


def test_a_command_that_fails_is_a_failed_job_and_artifacts_stay_inside_the_run(tmp_path):
    from stateset_agents.core.errors import StatesetError
    from stateset_agents.core.runtimes import load_component

    failing = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with load_component("provider:localcmd", config={"command": failing}) as provider:
        provider.launch(_plan(tmp_path, "sa-fails", max_cost=1.0, max_hours=1.0))
        status = _wait_for(provider, "sa-fails", ("failed", "succeeded", "terminated"))
        assert status["state"] == "failed" and "exited with code 3" in status["message"]
        for path in ("../job.json", "/etc/passwd", "missing.txt"):
            with pytest.raises(StatesetError):
                provider.read_artifact({"run_id": "sa-fails", "path": path})
        with pytest.raises(StatesetError, match="not a run id"):
            provider.status("../elsewhere")
        with pytest.raises(StatesetError, match="training jobs only"):
            provider.chat_open({"session_id": "s"})


#: A command that behaves as the kernel's worker does around a cooperative stop: it reports a checkpoint in
#: status.json, logs events, and on the stop file writes a receipt and status "stopped" and exits 0.
STOPPABLE = [sys.executable, "-c", """
import json, os, sys, time
from pathlib import Path
job = Path(os.environ["STATESET_JOB_DIR"])
def status(**kw):
    (job / "status.json").write_text(json.dumps({"pid": os.getpid(), **kw}))
ckpt = [{"step": 1, "committed_updates": 1, "path": "checkpoints/step-1", "complete": True}]
status(state="running", checkpoints=ckpt, quarantined=None, stop_requested=False)
with open(job / "events.jsonl", "a") as log:
    log.write(json.dumps({"type": "checkpoint", "step": 1}) + "\\n")
    log.flush()
    while not (job / "stop").exists():
        time.sleep(0.05)
    log.write(json.dumps({"type": "failed", "reason": "interrupted"}) + "\\n")
(job / "receipt.json").write_text(json.dumps({"state": "stopped", "files": [],
                                               "final_event": {"type": "failed", "reason": "interrupted"}}))
status(state="stopped", checkpoints=ckpt, quarantined=None, stop_requested=True)
"""]


def test_a_cooperative_stop_logs_and_status_pass_through(tmp_path):
    import base64

    from stateset_agents.core.runtimes import load_component

    with load_component("provider:localcmd", config={"command": STOPPABLE}, runtime="subprocess") as provider:
        assert provider.stop("sa-never")["requested"] is False
        assert provider.logs({"run_id": "sa-never", "offset": 0}) == {"data_b64": "", "offset": 0, "eof": True}
        provider.launch(_plan(tmp_path, "sa-coop", max_cost=1.0, max_hours=1.0))
        try:
            _wait_for(provider, "sa-coop", ("running",))
            for _ in range(200):  # the command writes its first event a moment after it starts
                first = provider.logs({"run_id": "sa-coop", "offset": 0})
                if first["data_b64"]:
                    break
                time.sleep(0.05)
            assert json.loads(base64.b64decode(first["data_b64"])) == {"type": "checkpoint", "step": 1}
            running = provider.status("sa-coop")
            assert running["checkpoints"][0]["complete"] and running["quarantined"] is None
            assert provider.stop("sa-coop")["requested"] is True
            final = _wait_for(provider, "sa-coop", ("stopped", "failed", "succeeded", "terminated"))
            assert final["state"] == "stopped" and final["stop_requested"] is True
            rest = provider.logs({"run_id": "sa-coop", "offset": first["offset"]})
            assert json.loads(base64.b64decode(rest["data_b64"]))["reason"] == "interrupted" and rest["eof"]
            assert provider.stop("sa-coop")["requested"] is False
        finally:  # a failed assertion must not leave the job running until its deadline
            provider.terminate("sa-coop")
