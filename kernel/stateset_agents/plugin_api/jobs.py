"""The contract between a provider and the job it runs: what a provider (first-party or a third party's) needs to
start the kernel's worker next to a trainer and to hand it the run plan.

The worker is a program of the kernel, started by its command on the provider's machine:

    python -m stateset_agents.remote.worker run JOB_DIR   run the job whose workspace is already in JOB_DIR
    python -m stateset_agents.remote.worker pod           unpack the bundle from the environment into
                                                          $STATESET_JOB_DIR, serve status, receipt and files
                                                          over HTTP (bearer $STATESET_RUN_TOKEN), run
    python -m stateset_agents.remote.chat_worker pod      serve chat turns with an uploaded adapter (`chat_host`)

It reads the environment below, writes ``status.json``, ``events.jsonl`` and, at the end, ``receipt.json`` (every
artifact under ``run/`` with its sha256) in the job directory, and stops at the next safe boundary once a file
named `STOP_FILE` appears there. The workspace travels as a bundle (`bundle`, `unpack_bundle`): a gzipped tar of
``plan.json``, ``config.json`` and the input snapshots, base64 for JSON transport, bound by its sha256.
"""
from __future__ import annotations

import base64
import io
import os
import sys
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any, Mapping

from ..core.errors import InputError, StatesetError
from ..core.jsonio import sha256_bytes

WORKER_MODULE = "stateset_agents.remote.worker"
CHAT_WORKER_MODULE = "stateset_agents.remote.chat_worker"
#: The command a container image runs for a job (the bundle in the environment) and for a chat session.
POD_COMMAND = f"python -m {WORKER_MODULE} pod"
CHAT_POD_COMMAND = f"python -m {CHAT_WORKER_MODULE} pod"

DEADLINE_ENV = "STATESET_DEADLINE_AT"  # epoch seconds: the job stops, then exits, at this time whatever happens
RUN_ID_ENV = "STATESET_RUN_ID"
TOKEN_ENV = "STATESET_RUN_TOKEN"  # the bearer token a pod's HTTP front asks for
BUNDLE_ENV = "STATESET_BUNDLE_B64"  # base64 of the gzipped workspace tar (no quotes: it rides in GraphQL)
BUNDLE_SHA_ENV = "STATESET_BUNDLE_SHA256"
PROVIDER_ENV = "STATESET_PROVIDER"  # the provider a pod asks to terminate itself at the deadline
JOB_DIR_ENV = "STATESET_JOB_DIR"
PORT_ENV = "STATESET_PORT"
STOP_FILE = "stop"  # written by a provider's terminate: the trainer stops, saves and ends its hosted session

PLAN_FILE = "plan.json"
CONFIG_FILE = "config.json"
STATE_DIR_ENV = "STATESET_AGENTS_STATE_DIR"


def worker_argv(job: str | os.PathLike) -> list[str]:
    """The command that runs the job in `job` with this Python (a detached local process, a container's shell)."""
    return [sys.executable, "-m", WORKER_MODULE, "run", str(job)]


# ------------------------------------------------------------------------------------------------ local state
def state_dir() -> Path:
    """The kernel's state directory on this machine (0700): $STATESET_AGENTS_STATE_DIR, else
    $XDG_STATE_HOME/stateset-agents. A provider keeps its own records under ``state_dir() / NAME``."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        base = Path(explicit)
    else:
        xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        base = Path(xdg) / "stateset-agents"
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def private_dir(path: Path) -> Path:
    """A directory only its owner can read: datasets and tokens live there."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


# ---------------------------------------------------------------------------------------------------- bundle
def bundle(workspace: Path, plan: Mapping[str, Any]) -> dict[str, Any]:
    """The workspace as one gzipped tar (base64 for JSON transport) that the worker unpacks: `PLAN_FILE`,
    `CONFIG_FILE` and every input the plan lists, with fixed metadata so the same workspace gives the same bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in [PLAN_FILE, CONFIG_FILE] + [i["file"] for i in (plan.get("inputs") or {}).values()]:
            info = tar.gettarinfo(str(workspace / name), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with open(workspace / name, "rb") as f:
                tar.addfile(info, f)
    data = buf.getvalue()
    return {"b64": base64.b64encode(data).decode(), "sha256": sha256_bytes(data), "size": len(data)}


def unpack_bundle(b: Mapping[str, Any], dest: Path) -> None:
    """Unpack a bundle ({"b64", "sha256"}) into `dest` (made private), refusing one whose sha256 does not match."""
    data = base64.b64decode(b["b64"])
    if sha256_bytes(data) != b["sha256"]:
        raise InputError("the workspace bundle is corrupt (sha256 mismatch)")
    private_dir(dest)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")  # the data filter refuses absolute paths, links out and devices


# ------------------------------------------------------------------------------------------------- artifacts
class ArtifactMismatch(StatesetError):
    """An artifact that does not match its receipt (or a receipt naming an unsafe path)."""

    exit_code = 5


def safe_relpath(rel: str) -> str:
    """A receipt's relative path as posix, refused when it is absolute, empty or climbs out (``..``)."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        raise ArtifactMismatch(f"the receipt names an unsafe path {rel!r}; refusing it")
    return p.as_posix()
