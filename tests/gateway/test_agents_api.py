"""The Agents API over a real gateway (uvicorn on loopback, the tiny model), on SQLite and on a real PostgreSQL:
an agent answering the official `openai` client as `agent:NAME`, its live score in /conversations, the export
read by `stateset-agents ingest` as it is, owners kept apart, /metrics, migrations, and schemathesis over the new
routes."""
from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("prometheus_client")

from stateset_agents.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def gw(database, tiny_model_dir, tmp_path_factory):
    from stateset_agents.gateway.keys import create_key
    from stateset_agents.gateway.server import Options, start

    root = tmp_path_factory.mktemp("agents")
    registry = root / "registry"
    registry.mkdir()
    keys = {name: create_key(registry, name, scope, database=database)[0] for name, scope in
            (("alice", "infer"), ("bob", "train"), ("ops", "admin"))}
    running = start(Options(registry=str(registry), base_model=str(tiny_model_dir), port=0, database=database,
                            capture=str(root / "capture"), capture_raw=True,
                            engine_config={"max_new_tokens": 16, "max_prompt_tokens": 512, "device": "cpu"}))
    base = next(m["id"] for m in running.gateway.engine.models() if m["kind"] == "base")
    yield SimpleNamespace(url=running.url, keys=keys, base=base, root=root, db=database, running=running)
    running.stop()


def call(gw, method, path, who="alice", **kw):
    headers = {"authorization": f"Bearer {gw.keys[who]}"} if who else {}
    return httpx.request(method, gw.url + path, headers=headers, timeout=60, **kw)


def test_an_agent_answers_the_openai_client_and_its_scored_conversation_is_exported_and_ingested(gw, tmp_path,
                                                                                                 monkeypatch):
    created = call(gw, "POST", "/agents", json={
        "name": "helper", "model": gw.base, "system_prompt": "You are the support desk of Acme.",
        "reward": {"name": "customer_support"}})
    assert created.status_code == 201, created.text
    agent = created.json()
    assert agent["owner"] == "alice" and agent["reward"]["name"] == "reward:customer_support"
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=gw.keys["alice"])
    reply = client.chat.completions.create(model="agent:helper", messages=[{"role": "user", "content": "hello"}],
                                           max_tokens=8, temperature=0, seed=0)
    assert reply.model == "agent:helper" and reply.usage.completion_tokens > 0
    listed = call(gw, "GET", "/conversations", params={"agent": "helper"}).json()["data"]
    assert len(listed) == 1
    row = listed[0]
    assert row["agent"] == "helper" and row["model"] == gw.base
    assert 0.0 <= row["score"] <= 1.0 and row["score_detail"]["reward"]["name"] == "customer_support"
    assert row["usage"]["completion_tokens"] == reply.usage.completion_tokens
    one = call(gw, "GET", f"/conversations/{row['id']}").json()
    assert one["record"]["request"]["messages"][0] == {"role": "system",
                                                       "content": "You are the support desk of Acme."}
    assert one["record"]["response"]["choices"][0]["message"]["content"] == reply.choices[0].message.content
    # filters: by score and by time
    assert call(gw, "GET", "/conversations", params={"min_score": row["score"] + 1e-6}).json()["data"] == []
    assert len(call(gw, "GET", "/conversations", params={"since": row["created_at"] - 1}).json()["data"]) == 1
    assert call(gw, "GET", "/conversations", params={"until": row["created_at"] - 1}).json()["data"] == []
    export = call(gw, "GET", "/conversations/export", params={"agent": "helper"})
    assert export.status_code == 200 and export.headers["content-type"].startswith("application/x-ndjson")
    lines = export.content.splitlines()
    assert len(lines) == 1 and json.loads(lines[0]) == one["record"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "export.jsonl").write_bytes(export.content)
    assert main(["ingest", "--format", "openai", "--input", "export.jsonl", "--output", "ingested"]) == 0
    transcripts = [json.loads(x) for x in (tmp_path / "ingested" / "transcripts.jsonl").read_text().splitlines()]
    assert len(transcripts) == 1
    messages = transcripts[0]["messages"]
    assert messages[0]["role"] == "system" and messages[-1]["content"] == reply.choices[0].message.content


def test_the_agent_answers_the_messages_api_too_and_crud_works(gw):
    agent = call(gw, "POST", "/agents", json={"name": "writer", "model": gw.base}).json()
    answer = call(gw, "POST", "/v1/messages", json={"model": "agent:writer", "max_tokens": 4,
                                                   "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 200 and answer.json()["model"] == "agent:writer"
    assert call(gw, "GET", "/conversations", params={"agent": "writer"}).json()["data"][0]["score"] is None
    changed = call(gw, "PATCH", f"/agents/{agent['id']}", json={"system_prompt": "Be brief."})
    assert changed.status_code == 200 and changed.json()["system_prompt"] == "Be brief."
    assert call(gw, "GET", f"/agents/{agent['id']}").json()["system_prompt"] == "Be brief."
    assert agent["id"] in {a["id"] for a in call(gw, "GET", "/agents").json()["data"]}
    assert call(gw, "DELETE", f"/agents/{agent['id']}").status_code == 204
    assert call(gw, "GET", f"/agents/{agent['id']}").status_code == 404
    gone = call(gw, "POST", "/v1/chat/completions", json={"model": "agent:writer",
                                                         "messages": [{"role": "user", "content": "hi"}]})
    assert gone.status_code == 404 and "no agent 'writer'" in gone.json()["error"]["message"]


def test_a_second_owner_cannot_see_use_or_change_the_first_owners_agent(gw):
    mine = call(gw, "POST", "/agents", json={"name": "private", "model": gw.base}).json()
    for method, path in (("GET", f"/agents/{mine['id']}"), ("PATCH", f"/agents/{mine['id']}"),
                         ("DELETE", f"/agents/{mine['id']}")):
        answer = call(gw, method, path, who="bob", json={} if method == "PATCH" else None)
        assert answer.status_code == 404, (method, answer.text)
    assert mine["id"] not in {a["id"] for a in call(gw, "GET", "/agents", who="bob").json()["data"]}
    assert call(gw, "GET", "/agents", who="bob", params={"owner": "alice"}).status_code == 403
    used = call(gw, "POST", "/v1/chat/completions", who="bob",
                json={"model": "agent:private", "messages": [{"role": "user", "content": "hi"}]})
    assert used.status_code == 404
    assert all(r["owner"] == "bob" for r in call(gw, "GET", "/conversations", who="bob").json()["data"])
    assert call(gw, "GET", "/conversations/export", who="bob", params={"agent": "helper"}).content == b""
    seen = call(gw, "GET", "/agents", who="ops", params={"owner": "alice"}).json()["data"]
    assert mine["id"] in {a["id"] for a in seen}
    assert call(gw, "GET", "/agents", who=None).status_code == 401
    assert call(gw, "GET", "/conversations", who=None).status_code == 401
    assert call(gw, "GET", "/training/jobs", who="alice").status_code == 403  # infer: no jobs


@pytest.mark.parametrize("body, status, field", [
    ({"name": "x"}, 400, "model"), ({"name": "bad name!", "model": "m"}, 400, "name"),
    ({"name": "x", "model": "no-such-model"}, 404, "model"), ({"name": "x", "model": "@base", "tools": "no"}, 400,
                                                               "tools"),
    ({"name": "x", "model": "@base", "reward": {"name": "no_such_reward"}}, 400, "reward"),
    ({"name": "x", "model": "@base", "colour": 1}, 400, "colour"), ([1], 400, None)])
def test_bad_agent_bodies_are_refused_naming_the_field(gw, body, status, field):
    if isinstance(body, dict) and body.get("model") == "@base":
        body = {**body, "model": gw.base}
    answer = call(gw, "POST", "/agents", json=body)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["param"] == field


def test_a_duplicate_name_and_bad_filters_are_client_errors(gw):
    call(gw, "POST", "/agents", json={"name": "twin", "model": gw.base})
    assert call(gw, "POST", "/agents", json={"name": "twin", "model": gw.base}).status_code == 409
    assert call(gw, "GET", "/conversations", params={"min_score": "high"}).status_code == 400
    assert call(gw, "GET", "/conversations", params={"limit": "0"}).status_code == 400
    assert call(gw, "GET", "/conversations/conv_nope").status_code == 404


def test_metrics_count_requests_tokens_queue_and_jobs(gw):
    call(gw, "POST", "/v1/chat/completions", json={"model": gw.base, "max_tokens": 3,
                                                  "messages": [{"role": "user", "content": "hi"}]})
    assert call(gw, "GET", "/metrics", who="alice").status_code == 403
    text = call(gw, "GET", "/metrics", who="ops").text
    assert 'gateway_requests_total{method="POST",route="/v1/chat/completions",status="200"}' in text
    assert f'gateway_tokens_total{{kind="completion",model="{gw.base}"}}' in text
    assert "gateway_queue_depth 0.0" in text and 'gateway_jobs{state="running"}' in text
    assert 'gateway_request_seconds_bucket{le="0.005",method="GET",route="/agents"}' in text or \
        "gateway_request_seconds_count" in text


def test_the_schema_is_migrated_once(gw):
    from stateset_agents.gateway.db import SCHEMA_VERSION, Database

    again = Database(gw.db)  # a second gateway on the same database: nothing applied twice
    assert again.versions() == list(range(1, SCHEMA_VERSION + 1))
    assert again.migrate() == SCHEMA_VERSION and again.versions() == list(range(1, SCHEMA_VERSION + 1))
    again.close()


def test_no_generated_request_to_the_new_routes_gets_a_500(gw):
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable

    schema = schemathesis.openapi.from_url(gw.url + "/openapi.json", headers={"x-api-key": gw.keys["ops"]})
    new = ("/agents", "/conversations", "/training/jobs")
    operations = [r.ok() for r in schema.get_all_operations() if r.ok().path.startswith(new)]
    assert len(operations) >= 10
    seen = []
    for mode in ("positive", "negative"):
        for operation in operations:
            @given(case=operation.as_strategy(generation_mode=schemathesis.GenerationMode(mode)))
            @settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                      database=None)
            def check(case):
                if case.path == "/training/jobs" and case.method.upper() == "POST" and isinstance(case.body, dict):
                    case.body.pop("dataset", None)  # never start a real job from generated input
                response = case.call(base_url=gw.url, headers={"x-api-key": gw.keys["ops"]}, timeout=30)
                seen.append(response.status_code)
                assert response.status_code < 500, (operation.path, case.body, response.text[:300])

            try:
                check()
            except Unsatisfiable:
                pass
    assert len(seen) > 30 and {400, 404} & set(seen)
