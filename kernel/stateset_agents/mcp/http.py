"""Streamable HTTP: the SDK's transport behind two checks of ours. Every request needs `Authorization: Bearer KEY`
with an admin key of the gateway's key store (REGISTRY/.keys.json; `stateset-agents keys create --scope admin`):
the tools write files and train, which an inference key may not. The `Origin` header (a browser's) must be one
allowed (loopback origins, plus --allow-origin), and the Host header one this server answers to (DNS rebinding)."""
from __future__ import annotations

import json
from typing import Iterable

from ..core.errors import InputError
from ..gateway.server import is_loopback
from .server import Options, build

LOOPBACK = ("127.0.0.1", "localhost", "::1")
MAX_BODY = 4 << 20  # bytes of one request: a tool call's arguments are capped at 1 MiB, JSON-RPC framing aside


class BearerKeys:
    """ASGI middleware: refuse (401/403, a JSON body saying why) any HTTP request without a valid admin key."""

    def __init__(self, app, keys):
        self.app, self.keys = app, keys

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        scheme, _, token = headers.get("authorization", "").partition(" ")
        key = self.keys.lookup(token.strip()) if scheme.lower() == "bearer" else None
        if key is None:
            return await _refuse(send, 401, "a valid API key is required: Authorization: Bearer KEY (stateset-agents "
                                            "keys create --registry REGISTRY --owner NAME --scope admin)")
        if not key.admin:
            return await _refuse(send, 403, f"key {key.id} has scope {key.scope}; the MCP tools need an admin key")
        if scope.get("method") != "POST":  # GET (the event stream) and DELETE carry no body
            return await self.app(scope, receive, send)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY:
            return await _refuse(send, 413, f"a request body is at most {MAX_BODY} bytes")
        body = await _read_capped(receive)
        if body is None:
            return await _refuse(send, 413, f"a request body is at most {MAX_BODY} bytes")
        return await self.app(scope, _replay(body, receive), send)


async def _read_capped(receive) -> bytes | None:
    """The whole body, read here so that one sent in chunks (no Content-Length) is capped too; None above
    MAX_BODY (or when the client went away)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive):
    """`receive` for the app: the body read already, then the client's own messages (its disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed():
        return pending.pop() if pending else await receive()

    return replayed


async def _refuse(send, status: int, message: str) -> None:
    body = json.dumps({"error": {"code": status, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="stateset-agents"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def app(options: Options, registry: str, host: str, port: int, allow_origins: Iterable[str] = ()):
    """The ASGI app: /mcp, behind the key check and the Host/Origin check."""
    from mcp.server.transport_security import TransportSecuritySettings

    from ..gateway.keys import KeyStore, keys_path

    keys = KeyStore(registry)
    if not len(keys):
        raise InputError(f"no API keys in {keys_path(registry)}: the HTTP transport refuses every caller without "
                         f"one; create one with `stateset-agents keys create --registry {registry} --owner NAME "
                         "--scope admin`", field="registry")
    hosts = [f"{h}:*" if ":" not in h else f"[{h}]:*" for h in (LOOPBACK if is_loopback(host) else (host,))]
    origins = [f"http://{h}:*" if ":" not in h else f"http://[{h}]:*" for h in LOOPBACK] + list(allow_origins)
    security = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                         allowed_origins=origins)
    starlette = build(options).streamable_http_app(transport_security=security, host=host)
    return BearerKeys(starlette, keys)


def serve(options: Options, registry: str, host: str, port: int, allow_origins: Iterable[str] = ()) -> None:
    import uvicorn

    uvicorn.run(app(options, registry, host, port, allow_origins), host=host, port=port, log_level="warning")
