"""Streamable HTTP: the official client over the SDK's streamable HTTP transport with a gateway admin key; no key,
a wrong key and an inference key are refused, and so is a browser Origin that is not allowed."""
from __future__ import annotations

import json

import anyio
import httpx2

from tests.mcp.mcp_helpers import Checked, free_port, http_server

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "0"}}}
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def test_http_needs_an_admin_key_and_an_allowed_origin(root, tmp_path):
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    from stateset_agents.gateway.keys import create_key

    registry = tmp_path / "registry"
    admin, _ = create_key(registry, "tester", "admin")
    infer, _ = create_key(registry, "reader", "infer")
    with http_server(root, registry, free_port()) as url:
        for headers, status in (({}, 401), ({"authorization": "Bearer ssa_wrong"}, 401),
                                ({"authorization": f"Basic {admin}"}, 401),
                                ({"authorization": f"Bearer {infer}"}, 403),
                                ({"authorization": f"Bearer {admin}", "origin": "http://evil.example"}, 403)):
            answer = httpx2.post(url, headers={**HEADERS, **headers}, content=json.dumps(INIT), timeout=30)
            assert answer.status_code == status, (headers, answer.text)
        assert "Bearer" in httpx2.post(url, headers=HEADERS, content=json.dumps(INIT)).headers["www-authenticate"]

        async def scenario():
            client = create_mcp_http_client(headers={"authorization": f"Bearer {admin}",
                                                     "origin": "http://localhost:3000"})
            async with client, streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    tools = (await session.list_tools()).tools
                    assert "ingest" in {t.name for t in tools} and "train_remote_launch" not in {t.name for t in tools}
                    s = Checked(session, tools)
                    done = await s.ok("ingest", {"format": "openai", "input": "logs.jsonl", "output": "ingested"})
                    assert done["written"] == 96 and (root / "ingested" / "transcripts.jsonl").is_file()
                    assert "outside the folders" in await s.error("ingest", {"format": "openai", "input": "/etc/hosts",
                                                                             "output": "x"})
                    uris = {str(r.uri) for r in (await session.list_resources()).resources}
                    assert uris == set()  # nothing but transcripts yet: no run, no improve folder
                    assert [p.name for p in (await session.list_prompts()).prompts] == ["improve_my_agent"]

        anyio.run(scenario)


def test_http_refuses_to_start_without_keys(root, tmp_path):
    import subprocess

    from tests.mcp.mcp_helpers import command, server_env

    done = subprocess.run(command(root, extra=("--http", "--port", str(free_port()), "--registry",
                                               str(tmp_path / "empty"))), env=server_env(), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "no API keys" in done.stderr and "keys create" in done.stderr
