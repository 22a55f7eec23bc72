"""Every route of the gateway's app, enumerated from `app.routes` (a route added without a row in ROUTES fails
here): each but health refuses no key, a wrong key and a revoked key (401) and a key below its scope (403); every
object route and every list keeps owners apart; every route has a rate limit (429 + retry-after) and a body limit
(413, declared or streamed); and no route or field naming a file reaches outside its root (`../`, absolute
paths, symlinks out, NUL bytes)."""
from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import httpx
import pytest

pytest.importorskip("prometheus_client")

HI = [{"role": "user", "content": "hi"}]
HEALTH = {("GET", "/healthz"), ("GET", "/readyz")}
LIMIT = 64 << 10
# (method, path template) -> (the scope it needs, whether it reads a JSON body)
ROUTES = {
    ("GET", "/openapi.json"): ("infer", False), ("GET", "/metrics"): ("admin", False),
    ("GET", "/v1/models"): ("infer", False), ("POST", "/v1/chat/completions"): ("infer", True),
    ("POST", "/v1/messages"): ("infer", True), ("POST", "/v1/messages/count_tokens"): ("infer", True),
    ("GET", "/v1/captures"): ("infer", False), ("GET", "/v1/captures/{name}"): ("infer", False),
    ("GET", "/v1/keys"): ("admin", False),
    ("POST", "/agents"): ("infer", True), ("GET", "/agents"): ("infer", False),
    ("GET", "/agents/{agent_id}"): ("infer", False), ("PATCH", "/agents/{agent_id}"): ("infer", True),
    ("DELETE", "/agents/{agent_id}"): ("infer", False),
    ("GET", "/conversations"): ("infer", False), ("GET", "/conversations/export"): ("infer", False),
    ("GET", "/conversations/{conversation}"): ("infer", False),
    ("POST", "/training/jobs"): ("train", True), ("GET", "/training/jobs"): ("train", False),
    ("GET", "/training/jobs/{job_id}"): ("train", False), ("POST", "/training/jobs/{job_id}/stop"): ("train", False),
    ("POST", "/training/jobs/{job_id}/cancel"): ("train", False),
    ("GET", "/training/jobs/{job_id}/events"): ("train", False),
}
BELOW = {"train": "infer", "admin": "train"}  # a key one scope short of the route's (infer is every key's)


@pytest.fixture(scope="module")
def gw(tiny_model_dir, tmp_path_factory):
    from stateset_agents.gateway.keys import create_key
    from stateset_agents.gateway.server import Options, start

    root = tmp_path_factory.mktemp("hardening")
    data, outside = root / "data", root / "outside"
    data.mkdir()
    outside.mkdir()
    (outside / "secret.jsonl").write_text('{"secret": "do not serve me"}\n')
    os.symlink(outside / "secret.jsonl", data / "link.jsonl")  # inside the root, pointing out of it
    registry = root / "registry"
    keys = {owner: create_key(registry, owner, scope)[0] for owner, scope in
            (("alice", "train"), ("bob", "train"), ("carol", "infer"), ("ops", "admin"))}
    running = start(Options(registry=str(registry), base_model=str(tiny_model_dir), port=0, capture=str(root / "cap"),
                            roots=(str(data),), max_body_bytes=LIMIT,
                            engine_config={"max_new_tokens": 4, "max_prompt_tokens": 256, "device": "cpu"}))
    base = running.gateway.engine.models()[0]["id"]
    state = SimpleNamespace(url=running.url, keys=keys, base=base, root=root, data=data, outside=outside,
                            registry=registry, running=running, ids={}, client=httpx.Client(timeout=60))
    # alice's objects: an agent, a served (captured, indexed) call, a finished job
    state.ids["agent_id"] = call(state, "POST", "/agents", json={"name": "desk", "model": base}).json()["id"]
    assert call(state, "POST", "/v1/chat/completions", json={"model": base, "messages": HI,
                                                             "max_tokens": 2}).status_code == 200
    state.ids["conversation"] = call(state, "GET", "/conversations").json()["data"][0]["id"]
    state.ids["name"] = call(state, "GET", "/v1/captures").json()["data"][0]["file"]
    job_dir = root / "jobs" / "job_alice"
    job_dir.mkdir(parents=True)
    now = time.time()
    running.gateway.db.execute(
        "INSERT INTO jobs (id, owner, kind, state, request, job_dir, created_at, updated_at) "
        "VALUES ('job_alice', 'alice', 'train', 'succeeded', '{}', ?, ?, ?)", (str(job_dir), now, now))
    state.ids["job_id"] = "job_alice"
    yield state
    state.client.close()
    running.stop()


def call(gw, method, path, who="alice", key=None, **kw):
    key = key if key is not None else gw.keys.get(who)
    headers = {**kw.pop("headers", {}), **({"authorization": f"Bearer {key}"} if key else {})}
    return gw.client.request(method, gw.url + path, headers=headers, **kw)


def _path(gw, template: str) -> str:
    return template.format(**gw.ids)


def _body(gw, template: str):
    return {"/v1/chat/completions": {"model": gw.base, "messages": HI, "max_tokens": 1},
            "/v1/messages": {"model": gw.base, "max_tokens": 1, "messages": HI},
            "/v1/messages/count_tokens": {"model": gw.base, "messages": HI},
            "/agents": {"name": "other", "model": gw.base}, "/agents/{agent_id}": {"system_prompt": "x"},
            "/training/jobs": {"kind": "train", "dataset": "nothing.jsonl", "algorithm": "nope"}}[template]


def test_the_table_names_every_route_of_the_app(gw):
    from fastapi.routing import APIRoute

    routes = {(m, r.path) for r in gw.running.gateway.app.routes if isinstance(r, APIRoute) for m in r.methods}
    assert routes == set(ROUTES) | HEALTH


def test_every_route_but_health_refuses_no_key_a_wrong_key_a_revoked_key_and_a_key_below_its_scope(gw):
    from stateset_agents.gateway.keys import create_key, revoke_key

    revoked, record = create_key(gw.registry, "alice", "admin")
    assert revoke_key(gw.registry, record["id"])
    low = {scope: create_key(gw.registry, "alice", scope)[0] for scope in ("infer", "train")}
    for (method, template), (scope, has_body) in ROUTES.items():
        path, body = _path(gw, template), (_body(gw, template) if has_body else None)
        for key in ("", "ssa_wrong", "Bearer", revoked, gw.keys["alice"] + "x"):
            answer = call(gw, method, path, key=key or "", who=None, json=body)
            assert answer.status_code == 401, (method, template, key[:8], answer.text)
        answer = call(gw, method, path, who=None, headers={"x-api-key": revoked}, json=body)
        assert answer.status_code == 401, (method, template)
        if scope in BELOW:
            answer = call(gw, method, path, key=low[BELOW[scope]], json=body)
            assert answer.status_code == 403, (method, template, answer.text)
            assert scope in answer.json()["error"]["message"]
    for method, path in HEALTH:
        assert httpx.request(method, gw.url + path).status_code == 200


def test_every_object_route_keeps_owners_apart(gw):
    ids = gw.ids
    for (method, template), (scope, has_body) in ROUTES.items():
        if "{" not in template:
            continue
        answer = call(gw, method, _path(gw, template), who="bob", json=_body(gw, template) if has_body else None)
        assert answer.status_code in (403, 404), (method, template, answer.text)
        assert "desk" not in answer.text and '"hi"' not in answer.text, (method, template)
    assert call(gw, "GET", f"/agents/{ids['agent_id']}").json()["system_prompt"] == ""  # bob's PATCH changed nothing
    for path, key in (("/agents", "agent_id"), ("/conversations", "conversation"), ("/training/jobs", "job_id"),
                      ("/v1/captures", "name")):
        mine = json.dumps(call(gw, "GET", path, who="bob").json())
        assert ids[key] not in mine, path
        assert call(gw, "GET", path, who="bob", params={"owner": "alice"}).status_code == 403
        assert ids[key] in json.dumps(call(gw, "GET", path, who="ops").json()), path
    assert call(gw, "GET", "/conversations/export", who="bob").content == b""
    assert call(gw, "GET", "/conversations/export", who="bob", params={"owner": "alice"}).status_code == 403
    assert b'"hi"' in call(gw, "GET", "/conversations/export").content


def test_every_route_is_rate_limited_per_key(gw):
    from stateset_agents.gateway.keys import create_key

    for n, ((method, template), (scope, has_body)) in enumerate(ROUTES.items()):
        key = create_key(gw.registry, f"rate{n}", scope, rate_limit=1)[0]  # owns nothing: no side effects
        body = {} if has_body else None
        first = call(gw, method, _path(gw, template), key=key, json=body)
        assert first.status_code != 429, (method, template)
        second = call(gw, method, _path(gw, template), key=key, json=body)
        assert second.status_code == 429 and int(second.headers["retry-after"]) >= 1, (method, template)


def test_every_route_refuses_a_body_over_the_limit(gw):
    big = b"{" + b" " * (LIMIT + 10) + b"}"

    def chunks():
        for _ in range(8):
            yield b" " * (LIMIT // 4)

    for (method, template), (scope, has_body) in ROUTES.items():
        who = "ops"
        answer = call(gw, method, _path(gw, template), who=who, content=big,
                      headers={"content-type": "application/json"})
        assert answer.status_code == 413, (method, template, answer.status_code)
        if has_body:  # no length declared: counted as it arrives
            answer = call(gw, method, _path(gw, template), who=who, content=chunks(),
                          headers={"content-type": "application/json"})
            assert answer.status_code == 413, (method, template, answer.text)


@pytest.mark.parametrize("name", ["..%2F..%2Foutside%2Fsecret.jsonl", "%2E%2E", "..", "%2Fetc%2Fpasswd",
                                  "alice-000001.jsonl%00", "alice-000099.jsonl"])
def test_a_capture_name_never_leaves_the_capture_folder(gw, name):
    planted = gw.root / "cap" / "alice-000099.jsonl"
    if not planted.is_symlink():
        os.symlink(gw.outside / "secret.jsonl", planted)  # a symlink planted in the capture folder
    answer = call(gw, "GET", f"/v1/captures/{name}", who="ops")
    assert answer.status_code in (400, 404) and "do not serve me" not in answer.text, (name, answer.text)
    assert "alice-000099.jsonl" not in json.dumps(call(gw, "GET", "/v1/captures", who="ops").json())


@pytest.mark.parametrize("field, body", [
    ("dataset", {"dataset": "../outside/secret.jsonl"}),
    ("dataset", {"dataset": "ABS/outside/secret.jsonl"}),
    ("dataset", {"dataset": "link.jsonl"}),  # a symlink inside the root pointing out
    ("dataset", {"dataset": "~/.ssh/id_rsa"}),
    ("eval_prompts", {"dataset": "ok.jsonl", "eval_prompts": "../outside/secret.jsonl"}),
    ("base_model", {"dataset": "ok.jsonl", "base_model": "ABS/outside"}),
    ("base_model", {"dataset": "ok.jsonl", "base_model": "models/../../outside"}),
    ("reward_config.policy", {"dataset": "ok.jsonl", "reward_config": {"policy": "ABS/outside/secret.jsonl"}}),
    ("config.extra[1].file", {"dataset": "ok.jsonl", "config": {"extra": [1, {"file": "../../etc/passwd"}]}}),
])
def test_a_training_job_names_no_file_outside_the_root(gw, field, body):
    body = json.loads(json.dumps({"kind": "train", "algorithm": "sft", **body}).replace("ABS", str(gw.root)))
    before = call(gw, "GET", "/training/jobs", who="ops").json()["data"]
    answer = call(gw, "POST", "/training/jobs", json=body)
    assert answer.status_code == 400 and answer.json()["error"]["param"] == field, answer.text
    assert "outside the folders" in answer.json()["error"]["message"]
    assert call(gw, "GET", "/training/jobs", who="ops").json()["data"] == before


def test_a_remote_plan_and_an_agents_reward_name_no_file_outside_the_root(gw):
    answer = call(gw, "POST", "/training/jobs", json={"kind": "train-remote", "config": {
        "provider": "local", "max_cost_usd": 1, "dataset": str(gw.outside / "secret.jsonl")}})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "config.dataset", answer.text
    answer = call(gw, "POST", "/agents", json={"name": "sly", "model": gw.base,
                                               "reward": {"name": "customer_support",
                                                          "config": {"policy_file": "../outside/secret.jsonl"}}})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "reward.config.policy_file"
    for name in ("../x", "/etc", "a/b"):
        assert call(gw, "POST", "/agents", json={"name": name, "model": gw.base}).status_code == 400
    for model in ("../../outside", str(gw.outside), "agent:../desk"):
        answer = call(gw, "POST", "/v1/chat/completions", json={"model": model, "messages": HI, "max_tokens": 1})
        assert answer.status_code == 404, (model, answer.text)


def test_confined_paths_resolve_inside_the_root_and_text_is_not_a_path(tmp_path):
    from stateset_agents.gateway.errors import ApiError
    from stateset_agents.gateway.paths import Confined

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rows.jsonl").write_text("{}\n")
    confined = Confined([tmp_path / "in"])
    assert confined.path("rows.jsonl", "dataset") == str((tmp_path / "in" / "rows.jsonl").resolve())
    assert confined.maybe_path("HuggingFaceTB/SmolLM2-135M-Instruct", "base_model") == \
        "HuggingFaceTB/SmolLM2-135M-Instruct"
    confined.scan({"policy": "refund within 30 days", "n": [1, 2.5, None, True], "long": "x" * 5000}, "config")
    with pytest.raises(ApiError) as caught:
        confined.scan({"a": {"b": [{"c": "/etc/passwd"}]}}, "config")
    assert caught.value.param == "config.a.b[0].c"
    with pytest.raises(ApiError):
        confined.path("rows.jsonl\x00../../x", "dataset")
