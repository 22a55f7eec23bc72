"""An adapter answering chat turns on a provider's machine: what `chat-remote` runs there, behind HTTP
(`python -m stateset_agents.remote.chat_worker pod`) or called in-process (`answer_from_volume`, for a provider
without an HTTP front, such as Modal's functions).

The provider puts the adapter's files under ``ROOT/incoming`` (or ``ROOT/model`` on a volume) with a listing
(`FILES`: every file with its size and sha256); `ChatHost.install` checks every file against the listing and swaps
the model directory in at once, so a mismatch installs nothing. The chat evaluator answers each turn in this process.
Past the deadline (`jobs.DEADLINE_ENV`) no turn is answered, and the process ends (`expire_at`).
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import StatesetError
from ..core.jsonio import load_json, sha256_file, write_json
from .jobs import DEADLINE_ENV, safe_relpath

MODEL_DIR = "model"  # the installed adapter/ and manifest.json
INCOMING_DIR = "incoming"
FILES = "files.json"  # the installed files with their sha256: what the provider compares before uploading


def failed(message: str) -> dict[str, Any]:
    return {"type": "failed", "reason": "error", "message": message}


class ChatHost:
    """One installed adapter and the chat evaluator (the one declaring `chat`) answering with it, one turn at a
    time."""

    def __init__(self, root: Path, deadline_at: float):
        self.root, self.deadline_at = Path(root), float(deadline_at)
        self._model: Any = None
        self._turn = threading.Lock()
        self._files = threading.Lock()

    @property
    def installed(self) -> dict[str, Any] | None:
        path = self.root / MODEL_DIR / FILES
        return load_json(path) if path.exists() else None

    def status(self) -> dict[str, Any]:
        installed = self.installed
        # ready: it answers; the client uploads the adapter (adapter_sha256 says which one it holds)
        return {"state": "running", "ready": True, "adapter_sha256": (installed or {}).get("sha256"),
                "deadline_at": self.deadline_at}

    def receive(self, rel: str, offset: int, data: bytes) -> None:
        target = self.root / INCOMING_DIR / safe_relpath(rel)
        with self._files:
            target.parent.mkdir(parents=True, exist_ok=True)
            if offset == 0 or not target.exists():
                target.write_bytes(b"")
            if target.stat().st_size != offset:
                raise ValueError(f"{rel}: a slice at offset {offset} does not follow the {target.stat().st_size} "
                                 "bytes received so far")
            with open(target, "ab") as f:
                f.write(data)

    def install(self, listing: Mapping[str, Any]) -> None:
        """Check every received file against the listing, then swap the whole model directory in."""
        incoming = self.root / INCOMING_DIR
        with self._files:
            verify(incoming, listing)
            write_json(incoming / FILES, dict(listing))
            target, old = self.root / MODEL_DIR, self.root / f".{MODEL_DIR}.old"
            shutil.rmtree(old, ignore_errors=True)
            if target.exists():
                os.replace(target, old)
            os.replace(incoming, target)
            shutil.rmtree(old, ignore_errors=True)
            self._model = None  # the next turn loads the new adapter

    def answer(self, request: Mapping[str, Any]) -> dict[str, Any]:
        if time.time() >= self.deadline_at:
            return failed("the chat session is past its deadline")
        if self.installed is None:
            return failed("no adapter is installed on this machine yet")
        with self._turn:
            if self._model is None:
                from ..core.registry import get_registry
                from ..core.runtimes import load_component

                self._model = load_component(get_registry().offering("evaluator", "chat").full_name,
                                             runtime="inprocess")
            last: dict[str, Any] = {}
            model_dir = self.root / MODEL_DIR
            # base_model stays as the client sent it (None: the manifest beside the adapter says which)
            for event in self._model.run({**dict(request), "adapter": str(model_dir / "adapter")}):
                last = event
            return last or failed("the chat evaluator ended without a reply")


def verify(directory: Path, listing: Mapping[str, Any]) -> None:
    """Every listed file is in `directory` with its size and sha256 (ValueError naming the first that is not)."""
    for entry in listing.get("files") or []:
        path = directory / safe_relpath(entry["path"])
        if not path.is_file():
            raise ValueError(f"{entry['path']} was not received")
        if path.stat().st_size != int(entry["size"]) or sha256_file(path) != entry["sha256"]:
            raise ValueError(f"{entry['path']} does not match its sha256 ({entry['sha256'][:16]}...): refusing it")


def expire_at(deadline: float, then=lambda: os._exit(124)) -> threading.Timer:
    """End this process at the deadline, whatever it is doing (the remote side of the cap)."""
    timer = threading.Timer(max(0.0, deadline - time.time()), then)
    timer.daemon = True
    timer.start()
    return timer


_VOLUME_HOSTS: dict[str, ChatHost] = {}


def answer_from_volume(root: str, request: Mapping[str, Any]) -> dict[str, Any]:
    """Modal's entry: the provider uploaded model/ and model/files.json to the volume; the first call in a
    container checks them, arms the deadline and keeps the loaded model for the calls after it."""
    deadline = float(os.environ[DEADLINE_ENV])
    host = _VOLUME_HOSTS.get(root)
    if host is None:
        host = ChatHost(Path(root), deadline)
        listing = host.installed
        if listing is None:
            return failed(f"no adapter on the volume at {root}")
        try:
            verify(host.root / MODEL_DIR, listing)
        except (ValueError, StatesetError) as exc:
            return failed(str(exc))
        expire_at(deadline)
        _VOLUME_HOSTS[root] = host
    return host.answer(request)
