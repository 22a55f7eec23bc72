"""The machine side of `chat-remote`: a trained adapter answering chat turns with the chat evaluator in this process,
on a rented machine (a RunPod pod, a Modal container) that holds nothing else.

    python -m stateset_agents.remote.chat_worker pod     serve HTTP on $STATESET_PORT (bearer $STATESET_RUN_TOKEN)
                                                       until $STATESET_DEADLINE_AT, then terminate the pod itself

HTTP, every call with `Authorization: Bearer TOKEN`:

    GET  /status                  {"state": "running", "ready": true, "adapter_sha256" (none yet: null), "deadline_at"}
    PUT  /upload/REL?offset=N     one slice of an adapter file (REL: adapter/FILE or manifest.json)
    POST /install                 {"sha256", "files": [{"path", "sha256", "size"}]}: every upload checked, then
                                  installed at once; one mismatch and nothing is
    POST /chat                    the chat evaluator's request (messages, decoding) -> its final event

The host itself (`plugin_api.chat_host.ChatHost`: install checks, deadline, one turn at a time) is the helper API's,
so a provider without an HTTP front (Modal) calls it in-process. Past the deadline no turn is answered, and the
process ends, so a session whose client vanished cannot outlive its budget.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from ..core.errors import StatesetError
from ..plugin_api.chat_host import ChatHost
from ..plugin_api.jobs import DEADLINE_ENV, JOB_DIR_ENV, PORT_ENV, TOKEN_ENV
from .worker import TokenHandler, start_server, terminate_self_at


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
    root = Path(os.environ.get(JOB_DIR_ENV, "/workspace/stateset-chat"))
    serve(ChatHost(root, deadline), os.environ[TOKEN_ENV], int(os.environ.get(PORT_ENV, "8765")))
    terminate_self_at(deadline)
    return 0


def main(argv: list[str]) -> int:
    if argv == ["pod"]:
        return pod_main()
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
