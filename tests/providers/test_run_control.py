"""Run control on every first-party provider: a cooperative `stop` (the worker's stop file, reached each provider's
way), `logs` (the job's events.jsonl from an offset) and `status` passing the worker's checkpoints, quarantine
record, stop request and the final state "stopped" through. Local and River read a job directory on this machine;
RunPod goes through its real SDK (the local GraphQL fake) to the pod's worker front, a real worker HTTP server;
Modal through its SDK module's fake, and the container's relay against autospecs of the installed SDK."""
from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest

from stateset_agents.core.errors import InputError
from stateset_agents.core.runtimes import load_component
from stateset_agents.plugin_api.jobs import STOP_FILE
from stateset_agents.remote import session
from stateset_agents.remote.worker import serve_files
from tests.providers.fake_modal import fake_modal  # noqa: F401 - the fixture
from tests.providers.provider_helpers import IMAGE

EVENTS = [{"type": "started", "run_id": "r"}, {"type": "progress", "step": 1, "total": 4},
          {"type": "checkpoint", "step": 1}]
CHECKPOINTS = [{"step": 1, "committed_updates": 1, "path": "checkpoints/step-1", "sha256": "ab" * 32,
                "complete": True, "missing": [], "validation": None}]


def _lines(events) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in events)


def _job(job: Path, *, state="running", **status) -> Path:
    """A job directory as the worker leaves it mid-run: status.json (with the run-control fields), events.jsonl."""
    job.mkdir(parents=True, exist_ok=True)
    (job / "job.json").write_text(json.dumps({"run_id": job.name, "job_id": f"x-{job.name}",
                                              "created_at": time.time(), "deadline_at": time.time() + 3600,
                                              "prices": {"train_per_mtok": 1.0, "sample_per_mtok": 1.0}}))
    (job / "status.json").write_text(json.dumps({"state": state, "pid": os.getpid(), "checkpoints": CHECKPOINTS,
                                                 "quarantined": None, "stop_requested": False, **status}))
    (job / "events.jsonl").write_bytes(_lines(EVENTS))
    return job


def _read_all(provider, run_id, *, length=None):
    """Follow the log as `finetune logs` does: from offset 0 until eof, each answer's offset the next request's."""
    data, offset, parts = b"", 0, 0
    while True:
        part = provider.logs({"run_id": run_id, "offset": offset, **({"length": length} if length else {})})
        chunk = base64.b64decode(part["data_b64"])
        assert part["offset"] == offset + len(chunk)
        data, offset, parts = data + chunk, part["offset"], parts + 1
        if part["eof"]:
            return data, offset, parts


# ------------------------------------------------------------------------------------------- local and river
@pytest.fixture(params=["local", "river"])
def here(request, tmp_path):
    """provider:local, and River (whose worker runs here too) with its own jobs directory."""
    if request.param == "local":
        with load_component("provider:local", config={"jobs_dir": str(tmp_path / "jobs")}) as provider:
            yield provider
    else:
        from stateset_plugins.providers.river.provider import RiverProvider

        yield RiverProvider({"jobs_dir": str(tmp_path / "jobs")})


def test_logs_stop_and_status_of_a_job_on_this_machine(here, tmp_path):
    job = _job(tmp_path / "jobs" / "sa-run1")
    data, offset, parts = _read_all(here, "sa-run1", length=40)
    assert data == _lines(EVENTS) and parts > 1  # slices of 40 bytes, resumed where the last one ended
    with open(job / "events.jsonl", "ab") as f:  # the worker writes on; a follower asks from its offset
        f.write(_lines([{"type": "completed"}]))
    more = here.logs({"run_id": "sa-run1", "offset": offset})
    assert base64.b64decode(more["data_b64"]) == _lines([{"type": "completed"}]) and more["eof"]
    status = here.status("sa-run1")
    assert status["state"] == "running" and status["checkpoints"] == CHECKPOINTS and status["stop_requested"] is False
    done = here.stop("sa-run1")
    assert done["requested"] and (job / STOP_FILE).exists()
    assert here.status("sa-run1")["stop_requested"] is True  # asked, before the worker has seen it
    # the worker honours it: a checkpoint saved, final state stopped, the receipt written as for succeeded
    _job(job, state="stopped", finished_at=time.time(), stop_requested=True)
    status = here.status("sa-run1")
    assert status["state"] == "stopped" and status["checkpoints"][0]["complete"]
    again = here.stop("sa-run1")
    assert not again["requested"] and "already stopped" in again["message"]


def test_a_quarantined_run_and_unknown_runs(here, tmp_path):
    record = {"reason": "non-finite gradients", "step": 3}
    _job(tmp_path / "jobs" / "sa-run2", state="failed", quarantined=record, finished_at=time.time())
    assert here.status("sa-run2")["quarantined"] == record
    assert here.status("sa-never")["state"] == "missing"
    assert here.stop("sa-never") == {"run_id": "sa-never", "requested": False, "message": "no such job"}
    assert here.logs({"run_id": "sa-never", "offset": 0}) == {"data_b64": "", "offset": 0, "eof": True}
    with pytest.raises(InputError, match="not a run id"):
        here.logs({"run_id": "../../etc", "offset": 0})


def test_local_stop_and_logs_through_the_subprocess_runtime(tmp_path):
    """The same operations over the provider contract's wire (the Stop and Logs RPCs)."""
    job = _job(tmp_path / "jobs" / "sa-run3")
    with load_component("provider:local", config={"jobs_dir": str(tmp_path / "jobs")}, runtime="subprocess") as p:
        assert base64.b64decode(p.logs({"run_id": "sa-run3", "offset": 0})["data_b64"]) == _lines(EVENTS)
        assert p.stop("sa-run3")["requested"] and (job / STOP_FILE).exists()
        assert p.status("sa-run3")["checkpoints"] == CHECKPOINTS


# ------------------------------------------------------------------------------------------------------ runpod
def _runpod_config(dataset, **over):
    return {"provider": "runpod", "dataset": str(dataset), "gpu": "H100", "gpus": 1, "max_hours": 2,
            "max_cost_usd": 10.0, "image": IMAGE, "algorithm": "sft", "reward": "gsm8k", **over}


def test_runpod_stop_logs_and_status_through_the_pods_worker(fake_runpod, dataset, tmp_path, monkeypatch):
    with load_component("provider:runpod") as provider:
        session.prepare(_runpod_config(dataset), tmp_path / "ws", provider)
        record = session.launch(tmp_path / "ws", provider)
        run_id, pod_id = record["run_id"], record["job"]["job_id"]
        job = _job(tmp_path / "pod-job")
        # the pod's worker front: the kernel's real HTTP server, token from the pod's environment
        server = serve_files(job, fake_runpod.env_of(pod_id)["STATESET_RUN_TOKEN"], 0, host="127.0.0.1")
        monkeypatch.setenv("STATESET_RUNPOD_PROXY_URL", f"http://127.0.0.1:{server.server_address[1]}")
        try:
            data, _, parts = _read_all(provider, run_id, length=50)
            assert data == _lines(EVENTS) and parts > 1
            status = provider.status(run_id)
            assert status["state"] == "running" and status["checkpoints"] == CHECKPOINTS
            assert provider.stop(run_id)["requested"] and (job / STOP_FILE).exists()  # POST /stop reached it
            _job(job, state="stopped", stop_requested=True)
            status = provider.status(run_id)
            assert status["state"] == "stopped" and status["stop_requested"]
            assert not provider.stop(run_id)["requested"]  # the worker says it is over
        finally:
            server.shutdown()
        # the worker front gone (or not up yet): no bytes, not the end; a pod that is gone: the end
        monkeypatch.setenv("STATESET_RUNPOD_PROXY_URL", "http://127.0.0.1:9")
        assert provider.logs({"run_id": run_id, "offset": 7}) == {"data_b64": "", "offset": 7, "eof": False}
        assert not provider.stop(run_id)["requested"]
        assert provider.stop("sa-never") == {"run_id": "sa-never", "requested": False, "message": "no such pod"}
        assert provider.logs({"run_id": "sa-never", "offset": 0}) == {"data_b64": "", "offset": 0, "eof": True}
        fake_runpod.pods[pod_id]["desiredStatus"] = "EXITED"
        assert "EXITED" in provider.stop(run_id)["message"]
    assert fake_runpod.creates == 1 and fake_runpod.terminated == []  # a stop never terminates


# ------------------------------------------------------------------------------------------------------- modal
def test_modal_stop_is_relayed_by_the_container_and_logs_come_from_the_volume(fake_modal, dataset, tmp_path):
    from stateset_plugins.providers import modal_sdk

    config = {"provider": "modal", "dataset": str(dataset), "gpu": "h100", "max_hours": 1, "max_cost_usd": 5.0,
              "image": IMAGE, "reward": "gsm8k"}
    with load_component("provider:modal") as provider:
        session.prepare(config, tmp_path / "ws", provider)
        run_id = session.launch(tmp_path / "ws", provider)["run_id"]
        assert provider.logs({"run_id": run_id, "offset": 0}) == {"data_b64": "", "offset": 0, "eof": True}
        job = _job(fake_modal.volumes / f"stateset-{run_id}" / "job")  # what the container committed
        data, _, _ = _read_all(provider, run_id, length=64)
        assert data == _lines(EVENTS)
        assert provider.status(run_id)["checkpoints"] == CHECKPOINTS
        done = provider.stop(run_id)
        assert done["requested"] and fake_modal.runs[run_id]["stop_requested"]
        assert provider.status(run_id)["stop_requested"] and not (job / STOP_FILE).exists()
        # inside the container: one relay turns the flag into the worker's stop file and commits the volume
        volume = mock.create_autospec(__import__("modal").Volume)
        assert modal_sdk.relay(run_id, job, f"stateset-{run_id}", sdk=SimpleNamespace(Volume=volume))
        assert (job / STOP_FILE).exists() and volume.from_name.return_value.commit.called
        assert not modal_sdk.relay(run_id, job, f"stateset-{run_id}", sdk=SimpleNamespace(Volume=volume))
        # the worker saved and ended (exit 0 or not): the job is stopped, its checkpoint there to collect
        _job(job, state="stopped", stop_requested=True)
        fake_modal.calls["fc-1"] = ("succeeded", None)
        assert provider.status(run_id)["state"] == "stopped"
        assert not provider.stop(run_id)["requested"]
        assert provider.stop("sa-never")["requested"] is False
    assert fake_modal.cancels == []


def test_modal_relay_calls_match_the_installed_sdk(tmp_path):
    modal = pytest.importorskip("modal")
    from stateset_plugins.providers import modal_sdk

    sdk = SimpleNamespace(Dict=mock.create_autospec(modal.Dict), Volume=mock.create_autospec(modal.Volume))
    sdk.Dict.from_name.return_value = mock.create_autospec(modal.Dict, instance=True)
    sdk.Dict.from_name.return_value.get.return_value = {"call_id": "fc", "stop_requested": True}
    sdk.Volume.from_name.return_value = mock.create_autospec(modal.Volume, instance=True)
    assert modal_sdk.relay("sa-x", tmp_path, "stateset-sa-x", sdk=sdk) and (tmp_path / STOP_FILE).exists()
    sdk.Dict.from_name.assert_called_with(modal_sdk.RUNS_DICT, create_if_missing=True)
    sdk.Volume.from_name.return_value.commit.assert_called_once_with()
