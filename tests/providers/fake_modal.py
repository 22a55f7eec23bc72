"""A stand-in for `stateset_plugins.providers.modal_sdk` (the one module that touches Modal): a Dict of runs, spawned
calls, and for chat sessions a volume (a local directory) and a deployed chat function whose calls run the real
container entry (`chat_host.answer_from_volume`) in this process, with its deadline timer recorded, not armed."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.providers.provider_helpers import FAULTS

NAMES = ("claim", "record", "lookup", "all_runs", "spawn", "call_state", "cancel", "read_file", "reported_cost",
         "stop_app", "upload_files", "deploy_chat", "chat_call")


class FakeModalSDK:
    """Stands in for stateset_plugins.providers.modal_sdk: a Dict of runs and spawned calls."""

    def __init__(self, volumes: Path | None = None):
        self.runs: dict[str, dict] = {}
        self.spawns, self.cancels, self.calls = [], [], {}
        self.volumes = volumes or Path(".")
        self.stopped, self.deploys, self.chat_calls, self.apps, self.expiries = [], [], [], {}, []
        #: Injected faults by the number of the SDK call they hit (`fail_call`), and the calls made so far.
        self.faults: dict[int, str] = {}
        self.sdk_calls = 0
        self.most_running = 0  # the most spawned calls ever running at once

    def fail_call(self, number: int, fault: str) -> None:
        """Make SDK call `number` from now fail as Modal's client would: "500" (InternalFailure, nothing done), or
        done and its answer lost: "timeout" (modal's TimeoutError), "drop" (ConnectionError), "partial" (a reply
        that does not deserialize)."""
        assert fault in FAULTS, fault
        self.faults[self.sdk_calls + number] = fault

    def counted(self, fn):
        def call(*args, **kwargs):
            import modal.exception as exc

            self.sdk_calls += 1
            fault = self.faults.pop(self.sdk_calls, None)
            if fault == "500":
                raise exc.InternalFailure("internal server error")
            result = fn(*args, **kwargs)
            if fault == "timeout":
                raise exc.TimeoutError("deadline exceeded")
            if fault == "drop":
                raise exc.ConnectionError("connection closed")
            if fault == "partial":
                raise exc.DeserializationError("truncated reply")
            return result
        return call

    def claim(self, run_id, entry, sdk=None):
        if run_id in self.runs:
            return False, self.runs[run_id]
        self.runs[run_id] = entry
        return True, None

    def record(self, run_id, entry, sdk=None):
        self.runs[run_id] = entry

    def lookup(self, run_id, sdk=None):
        return self.runs.get(run_id)

    def all_runs(self, sdk=None):
        return list(self.runs.items())

    def spawn(self, run_id, **kw):
        self.spawns.append(kw)
        self.calls[f"fc-{len(self.spawns)}"] = ("running", None)
        self.most_running = max(self.most_running, self.running())
        return f"fc-{len(self.spawns)}"

    def running(self) -> int:
        """Spawned calls still running (a stopped app ends its calls)."""
        return sum(state == "running" for state, _ in self.calls.values())

    def call_state(self, call_id, sdk=None):
        return self.calls[call_id]

    def cancel(self, call_id, app_name, sdk=None):
        self.cancels.append((call_id, app_name))
        self.calls[call_id] = ("terminated", "cancelled")

    def read_file(self, volume, path, sdk=None):
        target = self.volumes / volume / path  # what the container committed to the run's volume
        if not target.is_file():
            raise FileNotFoundError(path)
        return target.read_bytes()

    def reported_cost(self, run_id, since, sdk=None):
        return None

    # ---------------------------------------------------------------------------------------------------- chat
    def stop_app(self, app_name, sdk=None):
        self.stopped.append(app_name)
        self.apps.pop(app_name, None)
        for number, spawned in enumerate(self.spawns, start=1):
            if spawned["app_name"] == app_name and self.calls[f"fc-{number}"][0] == "running":
                self.calls[f"fc-{number}"] = ("terminated", "app stopped")

    def upload_files(self, volume, local_dir, files, remote_dir, listing, sdk=None):
        target = self.volumes / volume / remote_dir
        for entry in files:
            (target / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(local_dir) / entry["path"], target / entry["path"])
        (target / "files.json").write_bytes(listing)

    def deploy_chat(self, session_id, *, run_id, app_name, image_ref, gpu, timeout_s, idle_s, volume, env, sdk=None):
        self.deploys.append({"session_id": session_id, "app_name": app_name, "image_ref": image_ref, "gpu": gpu,
                             "timeout_s": timeout_s, "idle_s": idle_s, "volume": volume, "env": env})
        self.apps[app_name] = {"volume": volume, "env": env}

    def chat_call(self, app_name, request, sdk=None):
        from stateset_agents.plugin_api import chat_host

        app = self.apps[app_name]  # a stopped app has no function to call: KeyError, like Modal's NotFoundError
        self.chat_calls.append(json.loads(json.dumps(request)))  # as sent over the wire
        saved = os.environ.get("STATESET_DEADLINE_AT")
        os.environ["STATESET_DEADLINE_AT"] = app["env"]["STATESET_DEADLINE_AT"]  # the container's environment
        try:
            return chat_host.answer_from_volume(str(self.volumes / app["volume"] / "chat"), request)
        finally:
            if saved is None:
                os.environ.pop("STATESET_DEADLINE_AT")
            else:
                os.environ["STATESET_DEADLINE_AT"] = saved


@pytest.fixture()
def fake_modal(monkeypatch):
    pytest.importorskip("modal")
    from stateset_plugins.providers import modal_sdk

    from stateset_agents.plugin_api import chat_host

    fake = FakeModalSDK(Path(os.environ["STATESET_AGENTS_STATE_DIR"]).parent / "modal-volumes")
    for name in NAMES:
        monkeypatch.setattr(modal_sdk, name, fake.counted(getattr(fake, name)))
    # the container ends itself at the deadline; here the timer is only recorded
    monkeypatch.setattr(chat_host, "expire_at", lambda deadline: fake.expiries.append(deadline))
    monkeypatch.setattr(chat_host, "_VOLUME_HOSTS", {})
    monkeypatch.setenv("MODAL_TOKEN_ID", "id")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "secret")
    monkeypatch.setenv("HOME", str(Path(os.environ["STATESET_AGENTS_STATE_DIR"]).parent))
    return fake
