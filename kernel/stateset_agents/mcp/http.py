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
        return await self.app(scope, receive, send)


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
