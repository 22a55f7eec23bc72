"""The job side: what runs next to the trainer, on this machine or in the trainer image on a provider's machine.

    python -m stateset_agents.remote.worker run JOB_DIR          run the job in JOB_DIR (workspace already there)
    python -m stateset_agents.remote.worker pod                  unpack the bundle from the environment into
                                                                 $STATESET_JOB_DIR, serve /status, /receipt, /files,
                                                                 /logs and POST /stop over HTTP (bearer token), run,
                                                                 keep serving

It honours the deadline (`STATESET_DEADLINE_AT`, epoch seconds counted from the job's creation): the trainer is
asked to stop, then the process exits, and in a pod the provider is asked to terminate the pod itself, so a job
whose client vanished still cannot outlive its budget. It writes `status.json` as it goes and, at the end,
`receipt.json`: every artifact under run/ with its sha256, which the kernel checks after download.

A file named STOP_FILE in the job directory is a cooperative stop: the trainer is cancelled, finishes the current
update, saves a checkpoint and ends "interrupted"; the job then ends in state "stopped" (receipt written as for
"succeeded", so the checkpoints can be collected). status.json carries the run's checkpoint table, its quarantine
record and stop_requested; a quarantined run ends "failed", never "succeeded". A plan with "resume" (from
`finetune prepare-resume`) carries the parent's checkpoint: placed at run/checkpoints/step-K for an exact
continuation (the trainer resumes from it), or loaded as the starting adapter (weights only).
"""
from __future__ import annotations

import fcntl
import hmac
import os
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ..core.jsonio import dumps_line, load_json, sha256_file, write_json
from ..plugin_api import checkpoints as ckpt
from ..plugin_api.jobs import (BUNDLE_ENV, BUNDLE_SHA_ENV, CONFIG_FILE, DEADLINE_ENV, JOB_DIR_ENV, PLAN_FILE, PORT_ENV,
                               PROVIDER_ENV, RUN_ID_ENV, STOP_FILE, TOKEN_ENV, unpack_bundle)

GRACE_S = 60.0  # from the stop request to a hard exit
STOP_POLL_S = 0.5  # how often the worker looks for STOP_FILE between the trainer's events
PROVENANCE_FILE = "resumed_from.json"  # in run/: the parent run and checkpoint a resumed run continues


def file_entries(root: Path, paths) -> list[dict[str, Any]]:
    """{"path" (relative to root, posix), "sha256", "size"} for each of `paths`, in order."""
    return [{"path": p.relative_to(root).as_posix(), "sha256": sha256_file(p), "size": p.stat().st_size}
            for p in paths]


def receipt_for(run_dir: Path, run_id: str, state: str, final: dict[str, Any] | None) -> dict[str, Any]:
    paths = sorted(p for p in run_dir.rglob("*") if p.is_file() and not p.name.startswith(".")) \
        if run_dir.is_dir() else []
    files = file_entries(run_dir, paths)
    return {"run_id": run_id, "state": state, "files": files, "final_event": final, "written_at": time.time()}


def request_for(job: Path, config: dict[str, Any]) -> dict[str, Any]:
    resume = config.get("resume") or {}
    if resume.get("mode") == "exact":
        return {**_base_request(job, config), "resume": True}
    if resume.get("mode") == "weights":
        return {**_base_request(job, config), "init_adapter": str(job / resume["checkpoint_dir"] / "adapter")}
    return _base_request(job, config)


def place_resume(job: Path, config: dict[str, Any]) -> None:
    """Put the parent's checkpoint where the trainer looks for it (exact: run/checkpoints/step-K) and record the
    lineage in run/, so the collected run names its parent."""
    resume = config.get("resume") or {}
    if not resume:
        return
    run = job / "run"
    run.mkdir(parents=True, exist_ok=True)
    if resume.get("mode") == "exact":
        source = job / resume["checkpoint_dir"]
        target = run / "checkpoints" / source.name
        if not target.exists():
            shutil.copytree(source, target)
        records = source.parent / "run"  # the parent's metrics and receipts up to the checkpoint
        for item in sorted(records.iterdir()) if records.is_dir() else []:
            if not (run / item.name).exists():
                shutil.copyfile(item, run / item.name)
    write_json(run / PROVENANCE_FILE, {k: resume.get(k) for k in ("mode", "parent_run_id", "checkpoint_step",
                                                                  "checkpoint_sha256")})


def _base_request(job: Path, config: dict[str, Any]) -> dict[str, Any]:
    return {"algorithm": config["algorithm"], "dataset": str(job / config["dataset"]),
            "eval_prompts": str(job / config["eval_prompts"]) if config.get("eval_prompts") else None,
            "base_model": config.get("base_model"), "base_model_revision": config.get("base_model_revision"),
            "reward": config.get("reward"),
            "reward_config": config.get("reward_config") or {}, "config": config.get("training") or {},
            "output": str(job / "run"), "eval": config.get("eval") or {},
            "init_adapter": str(job / config["init_adapter"]) if config.get("init_adapter") else None,
            # a hosted backend (River) the provider chose for this job; absent: the trainer's local torch backend
            **({"backend": load_json(job / "backend.json")} if (job / "backend.json").exists() else {})}


def _status(job: Path, **fields: Any) -> None:
    current = load_json(job / "status.json") if (job / "status.json").exists() else {}
    write_json(job / "status.json", {**current, **fields, "updated_at": time.time()})


def _quarantine(run: Path) -> dict[str, Any] | None:
    """The run's quarantine record; one that cannot be read still quarantines the run (fail closed)."""
    from ..core.errors import InputError

    try:
        return ckpt.quarantine(run) if run.is_dir() else None
    except InputError as exc:
        return {"reason": "unreadable_quarantine_record", "message": str(exc)}


def _refresh(job: Path, **fields: Any) -> None:
    """status.json with the run's checkpoint table and quarantine record as they are now."""
    run = job / "run"
    _status(job, checkpoints=ckpt.checkpoint_table(run) if run.is_dir() else [], quarantined=_quarantine(run),
            **fields)


def final_state(job: Path, final: dict[str, Any] | None, stop_requested: bool) -> tuple[str, str | None]:
    """(state, message): succeeded only for a completed, unquarantined run; stopped for an interruption the stop
    asked for (the engine saved a checkpoint); failed otherwise."""
    message = (final or {}).get("message")
    quarantined = _quarantine(job / "run")
    if quarantined:
        why = quarantined.get("reason") or quarantined.get("message") or "see run/quarantine.json"
        return "failed", f"quarantined: {why}"
    if final and final.get("type") == "completed":
        return "succeeded", message
    if final and final.get("reason") == "interrupted" and stop_requested:
        return "stopped", message
    return "failed", message


def _watch_stop(job: Path, trainer, done: threading.Event) -> None:
    while not done.wait(STOP_POLL_S):
        if (job / STOP_FILE).exists():
            _status(job, stop_requested=True, stop_requested_at=time.time())
            trainer.cancel()
            return


def run_job(job: Path) -> int:
    """Run the trainer for the job in `job`; exit code 0 when it completed (or stopped as asked)."""
    lock = os.open(job / "worker.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 3  # another worker owns this job: never train twice
    plan = load_json(job / PLAN_FILE)
    config = load_json(job / CONFIG_FILE)
    run_id = plan["run_id"]
    deadline = float(os.environ.get(DEADLINE_ENV) or plan["created_at"] + plan["max_hours"] * 3600)
    _status(job, state="running", pid=os.getpid(), started_at=time.time(), deadline_at=deadline,
            stop_requested=(job / STOP_FILE).exists())
    place_resume(job, config)
    from ..core.runtimes import load_component

    final: dict[str, Any] | None = None
    with load_component(f"trainer:{config['algorithm']}", runtime="inprocess") as trainer:
        def expire():
            _status(job, deadline_reached=True)
            trainer.cancel()
            time.sleep(GRACE_S)
            _status(job, state="failed", message="deadline reached", finished_at=time.time())
            os._exit(124)

        timer = threading.Timer(max(0.0, deadline - time.time()), expire)
        timer.daemon = True
        timer.start()
        done = threading.Event()
        threading.Thread(target=_watch_stop, args=(job, trainer, done), daemon=True).start()
        with open(job / "events.jsonl", "ab") as log:
            for event in trainer.run(request_for(job, config)):
                log.write(dumps_line(event))
                log.flush()
                if (job / STOP_FILE).exists():  # a stop request: the trainer stops at the next safe boundary
                    trainer.cancel()
                kind = event.get("type")
                if kind in ("completed", "failed"):
                    final = event
                if kind == "progress":
                    _status(job, step=event.get("step"), total=event.get("total"))
                elif kind in ("checkpoint", "log"):
                    _refresh(job)
        done.set()
        timer.cancel()
    stop_requested = (job / STOP_FILE).exists()
    state, message = final_state(job, final, stop_requested)
    # a stopped run's receipt is as a finished run's: its checkpoints are collected the same way
    write_json(job / "receipt.json", receipt_for(job / "run", run_id, state, final))
    _refresh(job, state=state, finished_at=time.time(), message=message, stop_requested=stop_requested)
    return 0 if state in ("succeeded", "stopped") else 1


class TokenHandler(BaseHTTPRequestHandler):
    """An HTTP handler that answers only callers with the job's bearer token (set `token` on a subclass)."""

    token = ""

    def log_message(self, *args):  # quiet: the job log is events.jsonl
        pass

    def send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self) -> bool:
        if hmac.compare_digest(self.headers.get("Authorization", ""), f"Bearer {self.token}"):
            return True
        self.send(401, b'{"error": "unauthorized"}')
        return False

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))


def start_server(handler: type[TokenHandler], port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def serve_files(job: Path, token: str, port: int, host: str = "0.0.0.0") -> Any:
    """A small authenticated HTTP front for a pod: status, receipt and ranged file reads (no writes)."""
    from urllib.parse import parse_qs, unquote, urlparse

    root = (job / "run").resolve()

    class Handler(TokenHandler):
        def do_GET(self):
            if not self.authorized():
                return
            url = urlparse(self.path)
            if url.path in ("/status", "/receipt"):
                path = job / f"{url.path[1:]}.json"
                return self.send(200, path.read_bytes()) if path.exists() else self.send(404, b"{}")
            if url.path.startswith("/files/"):
                target = (root / unquote(url.path[len("/files/"):])).resolve()
                if root not in target.parents or not target.is_file():
                    return self.send(404, b"{}")
                q = parse_qs(url.query)
                offset, length = int(q.get("offset", ["0"])[0]), int(q.get("length", [str(1 << 20)])[0])
                with open(target, "rb") as f:
                    f.seek(offset)
                    return self.send(200, f.read(length), "application/octet-stream")
            if url.path == "/logs":
                try:
                    offset, length = _range(parse_qs(url.query))
                except ValueError as exc:
                    return self.send(400, dumps_line({"error": str(exc)}))
                data = read_log(job, offset, length)
                return self.send(200, data, "application/octet-stream")
            return self.send(404, b"{}")

        def do_POST(self):
            if not self.authorized():
                return
            if urlparse(self.path).path != "/stop":
                return self.send(404, b"{}")
            return self.send(200, dumps_line({"requested": request_stop(job)}))

    Handler.token = token
    return start_server(Handler, port, host)


LOG_CHUNK = 1 << 20


def _range(query: dict[str, list[str]]) -> tuple[int, int]:
    """offset and length of a /logs request; bad input is a ValueError naming the field (a 400, never a 500)."""
    values = []
    for key, default in (("offset", "0"), ("length", str(LOG_CHUNK))):
        raw = query.get(key, [default])[0]
        if not raw.isdigit():
            raise ValueError(f"{key} must be a non-negative integer, got {raw!r}")
        values.append(int(raw))
    return values[0], min(values[1], LOG_CHUNK)


def read_log(job: Path, offset: int, length: int = LOG_CHUNK) -> bytes:
    """Bytes of the job's events.jsonl from `offset` (empty past its end, or before it exists)."""
    path = job / "events.jsonl"
    if not path.is_file():
        return b""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def request_stop(job: Path) -> bool:
    """Ask the job's worker to stop cooperatively (STOP_FILE); False when the job is already over."""
    st = load_json(job / "status.json") if (job / "status.json").exists() else {}
    if st.get("state") in ("succeeded", "stopped", "failed", "terminated"):
        return False
    (job / STOP_FILE).touch()
    return True


def terminate_self_at(deadline: float) -> None:
    """Wait for the deadline, then ask the provider to terminate this very job (the pod's own credentials; the
    kernel's watchdog is the other line of defence)."""
    while time.time() < deadline:
        time.sleep(min(30.0, max(0.0, deadline - time.time())))
    provider = os.environ.get(PROVIDER_ENV)
    if provider:
        from ..core.runtimes import load_component

        with load_component(f"provider:{provider}") as p:
            p.terminate(os.environ[RUN_ID_ENV])


def pod_main() -> int:
    """Entry point in the trainer image: unpack, serve, run, then keep serving the artifacts until the deadline."""
    job = Path(os.environ.get(JOB_DIR_ENV, "/workspace/stateset-job"))
    if not (job / PLAN_FILE).exists():
        unpack_bundle({"b64": os.environ[BUNDLE_ENV], "sha256": os.environ[BUNDLE_SHA_ENV]}, job)
    serve_files(job, os.environ[TOKEN_ENV], int(os.environ.get(PORT_ENV, "8765")))
    if not (job / "receipt.json").exists():  # a restarted container must not train again
        run_job(job)
    terminate_self_at(float(os.environ[DEADLINE_ENV]))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"] and len(argv) == 2:
        return run_job(Path(argv[1]))
    if argv[:1] == ["pod"]:
        return pod_main()
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
