"""The HTTP transport's boundary (issue 24): every JSON-RPC method, every tool, every resource and the prompt, asked
for without a key, with a wrong one, with a non-bearer scheme and with an inference key (also on an admin's live
session id), is refused before the SDK sees it and has no effect; bodies and arguments above the limits are refused
with the field; and the generated-arguments fuzz of test_fuzz.py, over HTTP this time. One server for the module,
with its own state directory (the per-test one does not exist yet when a module fixture starts)."""
from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import anyio.from_thread
import httpx2
import pytest

from tests.mcp.mcp_helpers import free_port, http_server, http_session
from tests.mcp.test_fuzz import fuzz, outside_and_escape

ACCEPT = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from stateset_agents import samples
    from stateset_agents.gateway.keys import create_key

    base = tmp_path_factory.mktemp("mcp-http")
    root = base / "work"
    root.mkdir()
    shutil.copy(samples.LOGS, root / "logs.jsonl")
    (root / "validation.jsonl").write_text("\n".join(samples.VALIDATION.read_text().splitlines()[:2]) + "\n")
    (root / "runs" / "r").mkdir(parents=True)  # a run and an improve folder: resources to list and to refuse
    (root / "runs" / "r" / "manifest.json").write_text('{"run_id": "r"}\n')
    (root / "improved").mkdir()
    (root / "improved" / "improve_summary.json").write_text('{"counts": {}}\n')
    (root / "improved" / "next_steps.md").write_text("# next\n")
    outside = outside_and_escape(root, base)
    registry = base / "registry"
    admin, _ = create_key(registry, "tester", "admin")
    infer, _ = create_key(registry, "reader", "infer")
    with (base / "server.err").open("w+") as errlog:
        with http_server(root, registry, free_port(), env={"STATESET_AGENTS_STATE_DIR": str(base / "state")},
                         errlog=errlog) as url:
            yield SimpleNamespace(url=url, admin=admin, infer=infer, root=root, outside=outside, errlog=errlog)


def rpc(method: str, params: dict | None = None, id: int = 1) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, **({"params": params} if params else {})})


def listing(served):
    async def run():
        async with http_session(served.url, served.admin) as session:
            return ((await session.list_tools()).tools, (await session.list_resources()).resources,
                    (await session.list_resource_templates()).resource_templates,
                    (await session.list_prompts()).prompts)

    return anyio.run(run)


def admin_session_id(served) -> str:
    answer = httpx2.post(served.url, headers={**ACCEPT, "authorization": f"Bearer {served.admin}"},
                         content=rpc("initialize", INIT), timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.headers["mcp-session-id"]


def test_every_method_tool_resource_and_prompt_needs_an_admin_key(served):
    tools, resources, templates, prompts = listing(served)
    assert len(tools) >= 19 and len(resources) >= 3 and templates and prompts
    requests = [rpc(m, INIT if m == "initialize" else None) for m in
                ("initialize", "ping", "tools/list", "resources/list", "resources/templates/list", "prompts/list")]
    for tool in tools:  # arguments that would work with a key: ingest would write `unauth-ingest`
        args = ({"format": "openai", "input": "logs.jsonl", "output": f"unauth-{tool.name}"}
                if tool.name == "ingest" else {"output": f"unauth-{tool.name}"})
        requests.append(rpc("tools/call", {"name": tool.name, "arguments": args}))
    uris = [str(r.uri) for r in resources] + ["stateset://runs/runs%2Fr/manifest.json"]
    requests += [rpc("resources/read", {"uri": u}) for u in uris]
    requests += [rpc("prompts/get", {"name": p.name, "arguments": {"logs": "logs.jsonl"}}) for p in prompts]
    live = admin_session_id(served)
    callers = [({}, 401), ({"authorization": "Bearer ssa_wrong"}, 401), ({"authorization": "Bearer"}, 401),
               ({"authorization": f"Basic {served.admin}"}, 401), ({"authorization": served.admin}, 401),
               ({"authorization": f"Bearer {served.admin}x"}, 401), ({"authorization": f"Bearer {served.infer}"}, 403)]
    refused = 0
    with httpx2.Client(timeout=30) as client:
        for body in requests:
            for headers, status in callers:
                for session in ({}, {"mcp-session-id": live}):  # a stolen session id is no key
                    answer = client.post(served.url, headers={**ACCEPT, **headers, **session}, content=body)
                    assert answer.status_code == status, (body[:120], headers, answer.text[:200])
                    error = answer.json()["error"]
                    assert error["code"] == status and "result" not in answer.json()
                    assert served.admin not in answer.text and served.infer not in answer.text  # no key echoed
                    refused += 1
        for method in ("GET", "DELETE"):  # the SSE stream and the session's end, too
            answer = client.request(method, served.url, headers={**ACCEPT, "mcp-session-id": live})
            assert answer.status_code == 401
    assert refused == len(requests) * len(callers) * 2
    assert not list(served.root.glob("unauth-*"))  # nothing ran

    async def admin_still_works():  # the control: with the key, the same ingest runs
        async with http_session(served.url, served.admin) as session:
            result = await session.call_tool("ingest", {"format": "openai", "input": "logs.jsonl",
                                                        "output": "authorized"})
            assert not result.is_error and result.structured_content["written"] == 96

    anyio.run(admin_still_works)


def test_size_limits(served):
    from stateset_agents.mcp.http import MAX_BODY
    from stateset_agents.mcp.server import MAX_ARGUMENT_BYTES

    auth = {**ACCEPT, "authorization": f"Bearer {served.admin}"}
    big = rpc("tools/call", {"name": "ingest", "arguments": {"format": "openai", "input": "x" * MAX_BODY,
                                                              "output": "big"}})
    answer = httpx2.post(served.url, headers=auth, content=big, timeout=30)
    assert answer.status_code == 413 and str(MAX_BODY) in answer.json()["error"]["message"]

    def chunks():  # no Content-Length: the transport stops reading past the cap
        for _ in range(MAX_BODY // 65536 + 4):
            yield b" " * 65536

    answer = httpx2.post(served.url, headers=auth, content=chunks(), timeout=30)
    assert answer.status_code == 413 and "content-length" not in {k.lower() for k in answer.request.headers}

    async def scenario():
        async with http_session(served.url, served.admin) as session:
            result = await session.call_tool("train", {"dataset": "d.jsonl", "output": "run",
                                                       "config": {"note": "x" * (MAX_ARGUMENT_BYTES + 10)}})
            text = result.content[0].text
            assert result.is_error and "(field 'config')" in text and str(MAX_ARGUMENT_BYTES) in text
            assert len(text) < 1000
            result = await session.call_tool("ingest", {"format": "openai", "input": "y" * 5000, "output": "o"})
            text = result.content[0].text
            assert result.is_error and "input: is 5000 characters long, above the limit of 4096" in text
            assert "yyyy" not in text  # the value is not repeated back
            result = await session.call_tool("ingest", {"format": "openai", "input": "z" * 300, "output": "o"})
            assert result.is_error and "each name in it at most 255" in result.content[0].text
            assert "(field 'input')" in result.content[0].text
            await session.send_ping()
            assert not (served.root / "run").exists() and not (served.root / "o").exists()

    anyio.run(scenario)


def test_generated_arguments_over_http(served):
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(http_session(served.url, served.admin)) as session:
            tools = portal.call(session.list_tools).tools
            assert fuzz(portal, session, tools, served.outside, 3, served.root) >= 3 * len(tools)
    served.errlog.seek(0)
    assert "Traceback" not in served.errlog.read()
