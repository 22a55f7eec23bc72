"""The one module that touches the `modal` SDK (imported lazily, here only). Every function takes the SDK module
as `sdk` (default: the real one), so a test can hand it an autospec of the real SDK and have every call checked
against the installed signatures.

Idempotency across machines: a Modal Dict (`stateset-runs`) maps run id -> call; `put(skip_if_exists=True)` claims
a run atomically on Modal's side before anything is deployed, so two clients can never both create the job.

Run control: `stop` sets "stop_requested" in the run's Dict entry; inside the container `relay` turns that into the
worker's stop file (and commits the volume, so status.json and events.jsonl are readable from outside) every
RELAY_S seconds while the worker runs.
"""
from __future__ import annotations

import time

RUNS_DICT = "stateset-runs"
RELAY_S = 10.0


def _modal(sdk=None):
    if sdk is not None:
        return sdk
    import modal

    return modal


def _remote_entry(bundle_b64: str, bundle_sha256: str, env: dict) -> dict:
    """Runs inside the container: unpack the workspace onto the volume, run the worker (relaying a stop request and
    committing the volume while it runs), commit the volume."""
    import os
    import subprocess
    from pathlib import Path

    os.environ.update(env)
    job = Path("/artifacts/job")
    from stateset_agents.plugin_api.jobs import RUN_ID_ENV, unpack_bundle, worker_argv

    unpack_bundle({"b64": bundle_b64, "sha256": bundle_sha256}, job)
    proc = subprocess.Popen(worker_argv(job))
    while proc.poll() is None:
        try:
            relay(env[RUN_ID_ENV], job, env["STATESET_VOLUME"])
        except Exception:  # noqa: BLE001 - a failed relay must not end the job; the next one tries again
            pass
        try:
            proc.wait(timeout=RELAY_S)
        except subprocess.TimeoutExpired:
            pass
    _modal().Volume.from_name(env["STATESET_VOLUME"]).commit()
    return {"exit_code": proc.returncode}


def relay(run_id: str, job, volume: str, sdk=None) -> bool:
    """Inside the container, once: the stop file in the job directory when the run's Dict entry asks for a stop,
    and a volume commit so the outside sees the worker's files. True when a stop was relayed."""
    from pathlib import Path

    from stateset_agents.plugin_api.jobs import STOP_FILE

    entry = lookup(run_id, sdk=sdk) or {}
    stop = bool(entry.get("stop_requested")) and not (Path(job) / STOP_FILE).exists()
    if stop:
        (Path(job) / STOP_FILE).touch()
    _modal(sdk).Volume.from_name(volume).commit()
    return stop


def claim(run_id: str, entry: dict, sdk=None) -> tuple[bool, dict | None]:
    """(True, None) when this call claimed the run; (False, existing entry) when someone already had."""
    runs = _modal(sdk).Dict.from_name(RUNS_DICT, create_if_missing=True)
    if runs.put(run_id, entry, skip_if_exists=True):
        return True, None
    return False, runs.get(run_id)


def record(run_id: str, entry: dict, sdk=None) -> None:
    _modal(sdk).Dict.from_name(RUNS_DICT, create_if_missing=True).put(run_id, entry)


def lookup(run_id: str, sdk=None) -> dict | None:
    return _modal(sdk).Dict.from_name(RUNS_DICT, create_if_missing=True).get(run_id)


def all_runs(sdk=None) -> list[tuple[str, dict]]:
    return list(_modal(sdk).Dict.from_name(RUNS_DICT, create_if_missing=True).items())


def spawn(run_id: str, *, app_name: str, image_ref: str, gpu: str, timeout_s: int, volume: str, env: dict,
          bundle_b64: str, bundle_sha256: str, sdk=None) -> str:
    """Deploy a one-function app (its timeout is the remote-side deadline) and spawn the job; the call id."""
    modal = _modal(sdk)
    app = modal.App(app_name, tags={"stateset_run_id": run_id})
    vol = modal.Volume.from_name(volume, create_if_missing=True)
    fn = app.function(image=modal.Image.from_registry(image_ref), gpu=gpu, timeout=timeout_s,
                      volumes={"/artifacts": vol}, env=env, serialized=True, name="train", retries=0)(_remote_entry)
    app.deploy(name=app_name)
    call = fn.spawn(bundle_b64, bundle_sha256, env)
    return call.object_id


def call_state(call_id: str, sdk=None) -> tuple[str, str | None]:
    """("running" | "succeeded" | "failed" | "terminated", message)."""
    modal = _modal(sdk)
    try:
        result = modal.FunctionCall.from_id(call_id).get(timeout=0)
    except TimeoutError:
        return "running", None
    except modal.exception.InputCancellation:
        return "terminated", "cancelled"
    except Exception as exc:  # noqa: BLE001 - the remote function raised: the job failed
        return "failed", f"{type(exc).__name__}: {exc}"
    ok = isinstance(result, dict) and result.get("exit_code") == 0
    return ("succeeded" if ok else "failed"), None if ok else f"worker exited with {result!r}"


def cancel(call_id: str, app_name: str, sdk=None) -> None:
    modal = _modal(sdk)
    modal.FunctionCall.from_id(call_id).cancel(terminate_containers=True)
    stop_app(app_name, sdk=sdk)


def stop_app(app_name: str, sdk=None) -> None:
    """Stop the app: its containers are terminated and nothing of it keeps running (or billing) afterwards."""
    _modal(sdk).App.lookup(app_name).stop()


def _chat_entry(request: dict) -> dict:
    """Runs inside the container: one chat turn with the adapter the provider put on the volume."""
    from stateset_agents.plugin_api.chat_host import answer_from_volume

    return answer_from_volume("/artifacts/chat", request)


def upload_files(volume: str, local_dir: str, files: list[dict], remote_dir: str, listing: bytes,
                 sdk=None) -> None:
    """Put `files` (paths relative to local_dir) and the listing (files.json) under remote_dir on the volume."""
    import io
    from pathlib import Path

    from stateset_agents.plugin_api.chat_host import FILES

    vol = _modal(sdk).Volume.from_name(volume, create_if_missing=True)
    with vol.batch_upload(force=True) as batch:
        for entry in files:
            batch.put_file(str(Path(local_dir) / entry["path"]), f"{remote_dir}/{entry['path']}")
        batch.put_file(io.BytesIO(listing), f"{remote_dir}/{FILES}")


def deploy_chat(session_id: str, *, run_id: str, app_name: str, image_ref: str, gpu: str, timeout_s: int,
                idle_s: int, volume: str, env: dict, sdk=None) -> None:
    """Deploy a one-function app answering chat turns: one container at most, gone `idle_s` after its last turn,
    no call longer than `timeout_s`, and the container itself ends at the session's deadline."""
    modal = _modal(sdk)
    app = modal.App(app_name, tags={"stateset_run_id": run_id, "stateset_session": session_id})
    vol = modal.Volume.from_name(volume, create_if_missing=True)
    app.function(image=modal.Image.from_registry(image_ref), gpu=gpu, timeout=timeout_s, volumes={"/artifacts": vol},
                 env=env, serialized=True, name="chat", retries=0, max_containers=1,
                 scaledown_window=idle_s)(_chat_entry)
    app.deploy(name=app_name)


def chat_call(app_name: str, request: dict, sdk=None) -> dict:
    """One turn on the deployed chat function (blocks until the reply)."""
    return _modal(sdk).Function.from_name(app_name, "chat").remote(request)


def read_file(volume: str, path: str, sdk=None) -> bytes:
    return b"".join(_modal(sdk).Volume.from_name(volume).read_file(path))


def reported_cost(run_id: str, since: float, sdk=None) -> float | None:
    """Spend Modal's billing report attributes to the run's app (hourly resolution; it lags)."""
    from datetime import datetime, timezone

    modal = _modal(sdk)
    start = datetime.fromtimestamp(since - since % 3600, timezone.utc)
    rows = modal.Workspace.from_context().billing.report(start=start, resolution="h",
                                                          tag_names=["stateset_run_id"])
    total = sum(float(r.cost) for r in rows if (r.tags or {}).get("stateset_run_id") == run_id)
    return total if rows else None


def now() -> float:
    return time.time()
