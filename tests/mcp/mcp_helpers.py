"""The official mcp client against the real server process: over stdio (`python -m stateset_agents mcp`) or over
streamable HTTP; results checked against the tool's declared output schema."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema


def server_env() -> dict[str, str]:
    """The test environment (state dir, test plugins, offline), which stdio_client would otherwise trim."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODAL_TOKEN")}
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    return env


def command(*roots: Path, extra: tuple[str, ...] = ()) -> list[str]:
    args = ["-m", "stateset_agents", "mcp"]
    for r in roots:
        args += ["--root", str(r)]
    return [sys.executable, *args, *extra]


@contextlib.asynccontextmanager
async def stdio_session(*roots: Path, extra: tuple[str, ...] = (), errlog=None):
    """A session with the server over stdio; `errlog`: a file for the server's stderr (default ours)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    cmd = command(*roots, extra=extra)
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=server_env(), cwd=str(roots[0]))
    async with stdio_client(params, **({"errlog": errlog} if errlog is not None else {})) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


class Checked:
    """A session wrapper: every tool result is checked against the output schema the server declared."""

    def __init__(self, session, tools):
        self.session = session
        self.schemas = {t.name: t.output_schema for t in tools}

    async def ok(self, name: str, args: dict[str, Any], **kw) -> dict[str, Any]:
        result = await self.session.call_tool(name, args, **kw)
        assert not result.is_error, f"{name}: {result.content[0].text}"
        jsonschema.validate(result.structured_content, self.schemas[name])
        assert result.content[0].text  # the short text beside the structured result
        return result.structured_content

    async def error(self, name: str, args: dict[str, Any]) -> str:
        result = await self.session.call_tool(name, args)
        assert result.is_error, f"{name} should have failed: {result.structured_content}"
        assert result.structured_content is None
        return result.content[0].text


@contextlib.asynccontextmanager
async def http_session(url: str, key: str):
    """A session with the server over streamable HTTP, with `key` as the bearer token."""
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    client = create_mcp_http_client(headers={"authorization": f"Bearer {key}"})
    async with client, streamable_http_client(url, http_client=client) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def http_server(root: Path, registry: Path, port: int, extra: tuple[str, ...] = (), env: dict | None = None,
                errlog=None):
    """The server over HTTP on `port`; `env` over the test's, `errlog` a file for its stderr (default a pipe)."""
    proc = subprocess.Popen(command(root, extra=("--http", "--port", str(port), "--registry", str(registry),
                                                 *extra)),
                            env={**server_env(), **(env or {})}, cwd=str(root), stdout=subprocess.DEVNULL,
                            stderr=errlog if errlog is not None else subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"the server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
