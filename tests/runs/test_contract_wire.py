"""Stop and Logs across the wire: a provider that has them answers through the subprocess runtime as in process; one
that lacks them is NotImplementedError to the kernel (the server answers UNIMPLEMENTED), never an internal error;
and `runs.stop` then says which provider cannot stop and points to `finetune cancel`."""
from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from stateset_agents import runs
from stateset_agents.core.errors import StatesetError
from stateset_agents.core.runtimes import load_component, load_spec
from stateset_agents.core.runtimes import wire
from stateset_agents.remote import state
from stateset_agents.core.registry import ComponentSpec
from tests.conformance import broken_plugins

SERVE_AS = str(Path(broken_plugins.__file__).with_name("serve_as.py"))  # the kernel's server, with test plugins


def test_local_stop_and_logs_through_the_subprocess_runtime_answer_as_in_process(state_dir):
    job = state_dir / "local" / "jobs" / "sa-wire0000000000000000"
    job.mkdir(parents=True)
    (job / "job.json").write_text(json.dumps({"run_id": job.name, "job_id": "local-x", "created_at": 0,
                                              "deadline_at": 1e12}))
    (job / "events.jsonl").write_bytes(b'{"type": "log", "message": "hello"}\n')
    (job / "status.json").write_text(json.dumps({"state": "succeeded", "pid": 1, "finished_at": 1}))
    answers = {}
    for runtime in ("inprocess", "subprocess"):
        with load_component("provider:local", runtime=runtime) as provider:
            if runtime == "subprocess":
                assert {wire.PROVIDER_STOP, wire.PROVIDER_LOGS} <= provider.features
            part = provider.logs({"run_id": job.name, "offset": 4})
            answers[runtime] = (base64.b64decode(part["data_b64"]), part["offset"], part["eof"],
                                provider.stop(job.name)["requested"])
    assert answers["inprocess"] == answers["subprocess"] == (b'pe": "log", "message": "hello"}\n', 36, True, False)


def test_a_provider_without_stop_is_not_implemented_across_the_wire_and_the_kernel_says_so():
    cls = broken_plugins.CrashingProvider  # it has no stop or logs
    spec = ComponentSpec(kind=cls.kind, name=cls.name, version=cls.version, target=cls, plugin="broken_plugins",
                         package="(test)")
    argv = [sys.executable, SERVE_AS, "--plugins", "broken_plugins", spec.full_name]
    with load_spec(spec, runtime="subprocess", argv=argv) as remote:
        assert wire.PROVIDER_STOP in remote.features  # today's server lists the RPC; the provider lacks the method
        with pytest.raises(NotImplementedError, match="does not implement stop"):
            remote.stop("sa-x")
        with pytest.raises(NotImplementedError, match="does not implement logs"):
            remote.logs({"run_id": "sa-x", "offset": 0})
        state.save_record({"run_id": "sa-x", "provider": spec.name, "phase": "running", "max_cost_usd": 1.0})
        with pytest.raises(StatesetError, match="broken_crashing cannot stop a run cooperatively; `finetune cancel "
                                                "sa-x` terminates it"):
            runs.stop("sa-x", provider=remote)
