"""provider:runpod's launch, through the real `runpod` SDK, with each API call of the launch in turn answered by a
500, too late, by a dropped connection or with half its JSON: the launch fails with a clear error naming the
provider (or succeeds), a retry never rents a second pod, the spend booked never passes the cap, and a pod a failed
launch left behind is listed by `costs --orphans` until the retry attaches to it."""
from __future__ import annotations

import json

import pytest

from stateset_agents.cli import main
from stateset_agents.core.errors import StatesetError
from stateset_agents.core.runtimes import load_component
from stateset_agents.remote import session, state
from tests.providers.provider_helpers import FAULTS, IMAGE

CAP = 10.0
LAUNCH_CALLS = 5  # RunPod API calls in one launch: the fresh quote (2), the look-up by name (1), the create (2)


def _config(dataset):
    return {"provider": "runpod", "dataset": str(dataset), "gpu": "H100", "gpus": 1, "max_hours": 2,
            "max_cost_usd": CAP, "image": IMAGE, "algorithm": "sft", "reward": "gsm8k"}


@pytest.fixture()
def short_timeout(monkeypatch):
    """The SDK waits 30 s for an answer: 0.5 s here, so that an answer 1.5 s late is a timeout."""
    import requests
    from runpod.api import graphql

    class Requests:
        @staticmethod
        def post(*args, **kwargs):
            return requests.post(*args, **{**kwargs, "timeout": 0.5})

    monkeypatch.setattr(graphql, "requests", Requests)


def _orphans(capsys, provider: str = "runpod", key: str = "job_id") -> set[str]:
    """What `costs --orphans` lists for `provider`: each orphan's `key`."""
    capsys.readouterr()
    assert main(["costs", "--orphans", "--providers", provider, "--json"]) == 0
    return {job[key] for job in json.loads(capsys.readouterr().out)}


@pytest.mark.parametrize("call", range(1, LAUNCH_CALLS + 1))
@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_at_any_call_of_a_launch(fake_runpod, short_timeout, dataset, tmp_path, capsys, call, fault):
    ws = tmp_path / "ws"
    with load_component("provider:runpod") as provider:
        run_id = session.prepare(_config(dataset), ws, provider)["run_id"]
        start = fake_runpod.api_calls
        fake_runpod.fail_call(call, fault)
        try:
            session.launch(ws, provider)
            failed = None
        except StatesetError as exc:
            failed = str(exc)
        assert fake_runpod.api_calls - start >= call  # the fault was met
        assert fake_runpod.creates <= 1
        if failed is not None:
            assert "runpod" in failed, failed
            # what the failed launch left running is nobody's until a retry attaches: an orphan
            assert _orphans(capsys) == set(fake_runpod.pods)
        record = session.launch(ws, provider)  # the retry: attaches to the pod, or creates the only one
        assert fake_runpod.creates == 1 and list(fake_runpod.pods) == [record["job"]["job_id"]]
        assert _orphans(capsys) == set()
        fake_runpod.pods[record["job"]["job_id"]]["uptimeSeconds"] = 3600  # an hour at $2.99
        session.cancel(run_id, provider)
    booked = session.booked_spend(state.load_record(run_id))
    assert 0 < booked <= CAP
    assert not fake_runpod.pods


# ---------------------------------------------------------------------------------------------------------- modal

from tests.providers.fake_modal import fake_modal  # noqa: E402,F401 - the fixture

MODAL_LAUNCH_CALLS = 3  # the claim in the runs Dict, the spawn, the record of its call id


def _modal_orphans(capsys) -> set[str]:
    return _orphans(capsys, "modal", "run_id")


@pytest.mark.parametrize("call", range(1, MODAL_LAUNCH_CALLS + 1))
@pytest.mark.parametrize("fault", FAULTS)
def test_modal_a_fault_at_any_call_of_a_launch(fake_modal, dataset, tmp_path, capsys, call, fault):
    ws = tmp_path / "ws"
    config = {"provider": "modal", "dataset": str(dataset), "gpu": "h100", "max_hours": 1, "max_cost_usd": 5.0,
              "image": IMAGE, "algorithm": "sft", "reward": "gsm8k"}
    with load_component("provider:modal") as provider:
        run_id = session.prepare(config, ws, provider)["run_id"]
        start = fake_modal.sdk_calls
        fake_modal.fail_call(call, fault)
        try:
            session.launch(ws, provider)
            failed = None
        except StatesetError as exc:
            failed = str(exc)
        assert fake_modal.sdk_calls - start >= call
        if failed is not None:
            assert "modal" in failed, failed
            # a failed launch leaves nothing running: what it spawned is stopped on the way out; a claim whose
            # answer was lost names no call, and is listed (it might have spawned one, for all the Dict says)
            assert fake_modal.running() == 0 and _modal_orphans(capsys) <= {run_id}
        record = session.launch(ws, provider)
        assert fake_modal.running() == 1 and record["job"]["job_id"] == f"fc-{len(fake_modal.spawns)}"
        assert _modal_orphans(capsys) == set()
        session.cancel(run_id, provider)
        assert fake_modal.running() == 0
    # a spawn whose answer was lost is stopped before the retry spawns: never two at once
    assert fake_modal.most_running == 1 and len(fake_modal.spawns) <= 2
    assert 0 <= session.booked_spend(state.load_record(run_id)) <= 5.0


def test_modal_a_launch_that_died_before_recording_its_call_is_an_orphan(fake_modal, dataset, tmp_path, capsys):
    """The kernel killed between spawn and record: the entry names no call, its app does; `costs --orphans`
    lists it, and terminating it stops the app."""
    config = {"provider": "modal", "dataset": str(dataset), "gpu": "h100", "max_hours": 1, "max_cost_usd": 5.0,
              "image": IMAGE, "algorithm": "sft", "reward": "gsm8k"}
    with load_component("provider:modal") as provider:
        run_id = session.prepare(config, tmp_path / "ws", provider)["run_id"]
        state.save_record({"run_id": run_id, "provider": "modal", "phase": "launching", "max_cost_usd": 5.0})
        fake_modal.claim(run_id, {"state": "creating", "created_at": 0.0, "deadline_at": 3600.0, "rate": 4.35})
        fake_modal.spawn(run_id, app_name=f"stateset-{run_id}")
        assert _modal_orphans(capsys) == {run_id}
        capsys.readouterr()
        assert main(["costs", "--clean-orphans", "--providers", "modal"]) == 0
        assert fake_modal.running() == 0 and fake_modal.stopped == [f"stateset-{run_id}"]
