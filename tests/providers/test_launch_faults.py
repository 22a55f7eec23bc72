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
from tests.providers.conftest import FAULTS
from tests.providers.provider_helpers import IMAGE

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


def _orphans(capsys) -> set[str]:
    capsys.readouterr()
    assert main(["costs", "--orphans", "--providers", "runpod", "--json"]) == 0
    return {job["job_id"] for job in json.loads(capsys.readouterr().out)}


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
