"""Keys (Bearer and x-api-key, scopes, owners' captures), the refusal to listen beyond loopback without keys,
per-key rate limits, a full queue (429 + retry-after), the body limit, and the health routes."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

from stateset_agents.core.errors import InputError  # noqa: E402
from tests.gateway.gateway_helpers import make_key  # noqa: E402

HI = [{"role": "user", "content": "hi"}]


def test_health_needs_no_key_and_says_ready(served):
    assert httpx.get(served.url + "/healthz").json() == {"status": "ok"}
    ready = httpx.get(served.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


@pytest.mark.parametrize("key", [None, "ssa_wrong"])
def test_no_key_or_a_wrong_key_is_401_in_each_shape(served, key):
    if key:
        with pytest.raises(openai.AuthenticationError) as caught:
            openai.OpenAI(base_url=served.url + "/v1", api_key=key, max_retries=0).models.list()
        assert caught.value.body["code"] == "invalid_api_key"
    else:  # the client refuses to send no key at all
        reply = httpx.get(served.url + "/v1/models")
        assert reply.status_code == 401 and reply.json()["error"]["code"] == "invalid_api_key"
    headers = {"x-api-key": key} if key else {}
    reply = httpx.post(served.url + "/v1/messages", headers=headers,
                       json={"model": served.base, "max_tokens": 4, "messages": HI})
    assert reply.status_code == 401 and reply.json()["error"]["type"] == "authentication_error"


def test_bearer_and_x_api_key_both_work(served):
    for headers in ({"authorization": f"Bearer {served.keys['alice']}"}, {"x-api-key": served.keys["alice"]}):
        assert httpx.get(served.url + "/v1/models", headers=headers).status_code == 200


def test_an_infer_key_cannot_use_admin_routes_nor_read_another_owners_capture(served):
    alice, bob, admin = ({"x-api-key": served.keys[k]} for k in ("alice", "bob", "admin"))
    denied = httpx.get(served.url + "/v1/keys", headers=alice)
    assert denied.status_code == 403 and denied.json()["error"]["type"] == "permission_error"
    listed = httpx.get(served.url + "/v1/keys", headers=admin).json()["data"]
    assert {k["owner"] for k in listed} >= {"alice", "bob", "ops"} and not any("sha256" in k for k in listed)
    openai.OpenAI(base_url=served.url + "/v1", api_key=served.keys["alice"]).chat.completions.create(
        model=served.base, messages=HI, max_tokens=2)
    mine = httpx.get(served.url + "/v1/captures", headers=alice).json()["data"]
    assert mine and {f["owner"] for f in mine} == {"alice"}
    assert httpx.get(served.url + "/v1/captures", headers=bob).json()["data"] == [] or \
        {f["owner"] for f in httpx.get(served.url + "/v1/captures", headers=bob).json()["data"]} == {"bob"}
    assert httpx.get(f"{served.url}/v1/captures/{mine[0]['file']}", headers=bob).status_code == 404
    assert httpx.get(f"{served.url}/v1/captures?owner=alice", headers=bob).status_code == 403
    assert httpx.get(f"{served.url}/v1/captures/{mine[0]['file']}", headers=admin).status_code == 200
    assert "alice" in {f["owner"] for f in httpx.get(served.url + "/v1/captures", headers=admin).json()["data"]}


def test_keys_create_prints_the_key_once_and_stores_only_its_hash(served, capsys):
    import hashlib
    import sqlite3

    key = make_key(capsys, served.registry, "carol", "infer")
    database = served.registry / ".gateway.sqlite3"
    with sqlite3.connect(database) as conn:
        rows = conn.execute("SELECT * FROM api_keys WHERE owner = 'carol'").fetchall()
    assert key.startswith("ssa_") and len(rows) == 1 and hashlib.sha256(key.encode()).hexdigest() in rows[0]
    assert all(key not in str(value) for value in rows[0])
    assert key.encode() not in database.read_bytes() and (database.stat().st_mode & 0o077) == 0
    # the running server reads the changed file: the new key works at once
    assert httpx.get(served.url + "/v1/models", headers={"x-api-key": key}).status_code == 200


def test_a_keys_rate_limit_is_429_with_retry_after(served):
    from stateset_agents.gateway.keys import create_key

    key, _ = create_key(served.registry, "dave", "infer", rate_limit=2)
    codes = [httpx.get(served.url + "/v1/models", headers={"x-api-key": key}) for _ in range(3)]
    assert [c.status_code for c in codes] == [200, 200, 429]
    assert int(codes[-1].headers["retry-after"]) >= 1


def test_a_body_over_the_limit_is_413(served):
    reply = httpx.post(served.url + "/v1/chat/completions", headers={"x-api-key": served.keys["alice"]},
                       content=json.dumps({"model": served.base, "messages": HI, "pad": "x" * (2 << 20)}))
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "request_too_large"


def test_malformed_json_is_400_not_500(served):
    reply = httpx.post(served.url + "/v1/messages", headers={"x-api-key": served.keys["alice"]}, content=b"{nope")
    assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"


def test_a_non_loopback_bind_without_keys_is_refused(tmp_path):
    from stateset_agents.gateway.server import Options, build

    with pytest.raises(InputError, match="without API keys"):
        build(Options(registry=str(tmp_path), host="0.0.0.0"))


def test_a_full_queue_is_429_with_retry_after(taught_model):
    from stateset_agents.gateway.server import Options, start

    running = start(Options(base_model=str(taught_model), port=0,
                            engine_config={"max_batch": 1, "queue_size": 1, "max_new_tokens": 400}))
    base = running.gateway.engine.models()[0]["id"]

    async def burst():
        client = openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="-", max_retries=0)

        async def one():
            try:
                await client.chat.completions.create(model=base, messages=HI, max_tokens=300,
                                                     extra_body={"ignore_eos": True})
                return 200, None
            except openai.RateLimitError as exc:
                return 429, exc.response.headers.get("retry-after")

        return await asyncio.gather(*(one() for _ in range(4)))

    try:
        results = asyncio.run(burst())
    finally:
        running.stop()
    codes = sorted(code for code, _ in results)
    # one decoding and at most one waiting: the rest are refused at once, whatever the timing
    assert set(codes) == {200, 429} and 1 <= codes.count(200) <= 2
    assert all(int(after) >= 1 for code, after in results if code == 429)


def test_serve_refuses_a_public_address_without_keys_before_loading_anything(tmp_path, capsys):
    from stateset_agents.cli import main

    assert main(["serve", "--registry", str(tmp_path), "--host", "0.0.0.0", "--port", "1"]) == 2
    err = capsys.readouterr().err
    assert "without API keys" in err and "keys create" in err
