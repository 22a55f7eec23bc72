"""The machine side of `chat-remote`: a trained adapter answering chat turns with `evaluator:chat` in this process,
on a rented machine (a RunPod pod, a Modal container) that holds nothing else.

    python -m stateset_agents.remote.chat_worker pod     serve HTTP on $STATESET_PORT (bearer $STATESET_RUN_TOKEN)
                                                       until $STATESET_DEADLINE_AT, then terminate the pod itself

HTTP, every call with `Authorization: Bearer TOKEN`:

    GET  /status                  {"state": "running", "ready": true, "adapter_sha256" (none yet: null), "deadline_at"}
    PUT  /upload/REL?offset=N     one slice of an adapter file (REL: adapter/FILE or manifest.json)
    POST /install                 {"sha256", "files": [{"path", "sha256", "size"}]}: every upload checked, then
                                  installed at once; one mismatch and nothing is
    POST /chat                    evaluator:chat's request (messages, decoding) -> its final event

Modal has no HTTP front: its function calls `answer_from_volume` with the files the provider put on the volume.
Past the deadline no turn is answered, and the process ends (`expire_at`), so a session whose client vanished
cannot outlive its budget.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping

from ..errors import StatesetError
from ..jsonio import load_json, sha256_file, write_json
from .artifacts import safe_relpath
from .worker import DEADLINE_ENV, TOKEN_ENV, TokenHandler, start_server, terminate_self_at

MODEL_DIR = "model"  # the installed adapter/ and manifest.json
INCOMING_DIR = "incoming"
FILES = "files.json"  # the installed files with their sha256: what the provider compares before uploading


def failed(message: str) -> dict[str, Any]:
    return {"type": "failed", "reason": "error", "message": message}


class ChatHost:
    """One installed adapter and the `evaluator:chat` component that answers with it, one turn at a time."""

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
                from ..runtimes import load_component

                self._model = load_component("evaluator:chat", runtime="inprocess")
            last: dict[str, Any] = {}
            model_dir = self.root / MODEL_DIR
            # base_model stays as the client sent it (None: the manifest beside the adapter says which)
            for event in self._model.run({**dict(request), "adapter": str(model_dir / "adapter")}):
                last = event
            return last or failed("evaluator:chat ended without a reply")


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


def serve(host: ChatHost, token: str, port: int, bind: str = "0.0.0.0"):
    from urllib.parse import parse_qs, unquote, urlparse

    class Handler(TokenHandler):
        def _json(self, code: int, obj: Any) -> None:
            self.send(code, json.dumps(obj).encode())

        def do_GET(self):
            if not self.authorized():
                return
            if urlparse(self.path).path == "/status":
                return self._json(200, host.status())
            return self._json(404, {"error": "not found"})

        def do_PUT(self):
            if not self.authorized():
                return
            url = urlparse(self.path)
            if not url.path.startswith("/upload/"):
                return self._json(404, {"error": "not found"})
            try:
                offset = int(parse_qs(url.query).get("offset", ["0"])[0])
                host.receive(unquote(url.path[len("/upload/"):]), offset, self.body())
            except (ValueError, OSError, StatesetError) as exc:  # a refusal, said to the client
                return self._json(400, {"error": str(exc)})
            return self._json(200, {"ok": True})

        def do_POST(self):
            if not self.authorized():
                return
            path = urlparse(self.path).path
            try:
                payload = json.loads(self.body() or b"{}")
                if path == "/install":
                    host.install(payload)
                    return self._json(200, host.status())
                if path == "/chat":
                    return self._json(200, host.answer(payload))
            except (ValueError, OSError, StatesetError) as exc:  # a refusal, said to the client
                return self._json(400, {"error": str(exc)})
            return self._json(404, {"error": "not found"})

    Handler.token = token
    return start_server(Handler, port, bind)


def pod_main() -> int:
    deadline = float(os.environ[DEADLINE_ENV])
    root = Path(os.environ.get("STATESET_JOB_DIR", "/workspace/stateset-chat"))
    serve(ChatHost(root, deadline), os.environ[TOKEN_ENV], int(os.environ.get("STATESET_PORT", "8765")))
    terminate_self_at(deadline)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["pod"]:
        return pod_main()
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
