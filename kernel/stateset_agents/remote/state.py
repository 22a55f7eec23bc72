"""Local state for remote runs: one directory (0700), configurable for tests.

    STATE/runs/RUN_ID.json    the run record: plan checksum, provider, workspace, output dir, job, phase
    STATE/locks/RUN_ID.lock   fcntl lock held around look-up-then-create, so two invocations never both create
    STATE/ledger.jsonl        one line per finished (or abandoned) job: what it spent
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from pathlib import Path
from typing import Any, Iterator

import orjson

from ..core.errors import InputError, StatesetError
from ..core.jsonio import dumps_line, load_json, write_json
from ..plugin_api.jobs import private_dir, state_dir

#: run phases after which nothing should be running any more ("closed": a chat session that ended; "stopped": a
#: cooperative stop honoured and its checkpoints collected, which `finetune prepare-resume` can continue)
FINAL_PHASES = ("completed", "failed", "cancelled", "capped", "collected", "closed", "stopped")
#: phases of a run whose job may be live: "launching" is recorded before the provider is asked to create the job,
#: so a client that died before hearing back leaves a trace the next invocation resolves (never a second job)
LIVE_PHASES = ("launching", "running")


@contextlib.contextmanager
def run_lock(run_id: str, timeout: float = 60.0) -> Iterator[None]:
    """Exclusive per-run lock across processes on this machine (released if the holder dies)."""
    path = private_dir(state_dir() / "locks") / f"{run_id}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StatesetError(f"run {run_id} is locked by another stateset-agents process") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def run_locked(run_id: str) -> bool:
    """Whether a process holds the run's lock now (a launch or a finish under way)."""
    path = private_dir(state_dir() / "locks") / f"{run_id}.lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def record_path(run_id: str) -> Path:
    """The run's record file; a run id that is not a plain name (`../x`, a slash, over 128 characters) is refused
    here, so no face (CLI, gateway, MCP, runs API) can make it a path out of the state directory."""
    if not isinstance(run_id, str) or not RUN_ID_PATTERN.fullmatch(run_id) or ".." in run_id:
        raise InputError(f"{str(run_id)[:80]!r} is not a run id (letters, digits, '.', '_', '-'; at most 128)",
                         field="run_id")
    return private_dir(state_dir() / "runs") / f"{run_id}.json"


def load_record(run_id: str) -> dict[str, Any] | None:
    path = record_path(run_id)
    return load_json(path) if path.exists() else None


def save_record(record: dict[str, Any]) -> dict[str, Any]:
    record["updated_at"] = time.time()
    write_json(record_path(record["run_id"]), record)
    return record


def update_record(run_id: str, **fields: Any) -> dict[str, Any]:
    record = load_record(run_id) or {"run_id": run_id}
    record.update(fields)
    return save_record(record)


def all_records() -> list[dict[str, Any]]:
    return [load_json(p) for p in sorted((state_dir() / "runs").glob("*.json"))] \
        if (state_dir() / "runs").is_dir() else []


def ledger_path() -> Path:
    return state_dir() / "ledger.jsonl"


def append_ledger(entry: dict[str, Any]) -> None:
    # one O_APPEND write of a whole line: concurrent writers never interleave within a line
    entry = {"at": time.time(), **entry}
    fd = os.open(ledger_path(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, dumps_line(entry))
    finally:
        os.close(fd)


def read_ledger() -> list[dict[str, Any]]:
    path = ledger_path()
    if not path.exists():
        return []
    rows = []
    for raw in path.read_bytes().splitlines():
        with contextlib.suppress(orjson.JSONDecodeError):
            rows.append(orjson.loads(raw))
    return rows
