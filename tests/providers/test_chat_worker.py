"""The chat worker that `chat-remote` runs on the remote side (the kernel's HTTP worker, no model loaded): it answers
only its token, takes uploads in order and inside its model directory, installs only files that match their sha256,
and refuses to chat past its deadline. Needs neither torch nor peft, unlike test_chat_remote."""
from __future__ import annotations

import json


def test_the_chat_worker_answers_only_its_token_and_installs_only_what_matches(tmp_path):
    import hashlib
    import urllib.error
    import urllib.request

    from stateset_agents.plugin_api.chat_host import ChatHost
    from stateset_agents.remote.chat_worker import serve

    host = ChatHost(tmp_path / "chat", deadline_at=4e9)
    server = serve(host, "tok", 0, bind="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def call(path, data=None, method=None, token="tok"):
        req = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    try:
        assert call("/status", token="wrong")[0] == 401
        assert call("/status")[1]["adapter_sha256"] is None
        assert call("/upload/adapter/w.bin?offset=0", b"abc", "PUT")[0] == 200
        assert call("/upload/adapter/w.bin?offset=9", b"def", "PUT")[0] == 400  # a gap: refused
        assert call("/upload/..%2Fescape?offset=0", b"x", "PUT")[0] == 400  # outside the model directory
        entry = {"path": "adapter/w.bin", "sha256": hashlib.sha256(b"abX").hexdigest(), "size": 3}
        code, body = call("/install", json.dumps({"sha256": "s1", "files": [entry]}).encode(), "POST")
        assert code == 400 and "does not match its sha256" in body["error"] and host.installed is None
        entry["sha256"] = hashlib.sha256(b"abc").hexdigest()
        code, body = call("/install", json.dumps({"sha256": "s1", "files": [entry]}).encode(), "POST")
        assert code == 200 and body["adapter_sha256"] == "s1"
        assert (tmp_path / "chat" / "model" / "adapter" / "w.bin").read_bytes() == b"abc"
        host.deadline_at = 0.0
        assert call("/chat", b'{"messages": []}', "POST")[1]["message"] == "the chat session is past its deadline"
    finally:
        server.shutdown()
