"""The FastAPI application: routes, keys and scopes, per-key rate limits, body limits, and errors in the shape of
the API called (``/v1/messages*``: the Messages API's, everything else the Chat Completions API's).

Generation never runs on the event loop: a request is rendered and queued in a worker thread (`submit`), the
engine decodes on its own thread, and its events come back through ``call_soon_threadsafe`` into an asyncio queue.
A full engine queue is a 429 with ``retry-after``; a client that goes away cancels its rows.
"""
from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from ..core.errors import InputError
from ..plugin_api.serving import ServerBusy
from . import agents_api, chat_api, conversations_api, messages_api
from .capture import Capture
from .errors import ApiError
from .keys import Key, KeyStore, has_scope

OPEN_KEY = Key(id="(no keys)", owner="local", scope="admin")  # a loopback server without keys
CONVERSATION_HEADER = "x-conversation-id"
DEFAULT_MAX_BODY = 1 << 20


@dataclass
class Settings:
    max_body_bytes: int = DEFAULT_MAX_BODY
    rate_limit: int = 600  # requests a minute per key, unless the key says otherwise
    cors_origins: tuple[str, ...] = ()
    models: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> what /v1/models adds


class _Buckets:
    """Per-key token buckets: `limit` requests a minute, bursts up to `limit`."""

    def __init__(self):
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, limit: int) -> float:
        """0 when the request may go, else the seconds until it may."""
        now = time.monotonic()
        with self._lock:
            tokens, then = self._state.get(key, (float(limit), now))
            tokens = min(float(limit), tokens + (now - then) * limit / 60.0)
            if tokens < 1:
                self._state[key] = (tokens, now)
                return (1 - tokens) * 60.0 / limit
            self._state[key] = (tokens - 1, now)
            return 0.0


class _Events:
    """The engine's events for one request, delivered on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.queue = loop, asyncio.Queue()

    def emit(self, event: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, event)

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            event = await self.queue.get()
            yield event
            if event["type"] in ("end", "failed"):
                return


def _messages_api(request: Request) -> bool:
    return request.url.path.startswith("/v1/messages")


def _error(request: Request, exc: ApiError) -> JSONResponse:
    body = exc.messages_body() if _messages_api(request) else exc.chat_body()
    return JSONResponse(body, status_code=exc.status, headers=exc.headers)


def _body_schema(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "required": required, "properties": properties}}}}}


_MESSAGES = {"type": "array", "minItems": 1, "items": {"type": "object", "required": ["role"], "properties": {
    "role": {"type": "string"}, "content": {}}}}
CHAT_SCHEMA = _body_schema(["model", "messages"], {
    "model": {"type": "string"}, "messages": _MESSAGES, "tools": {"type": "array"}, "tool_choice": {},
    "temperature": {"type": "number"}, "top_p": {"type": "number"}, "max_tokens": {"type": "integer"},
    "max_completion_tokens": {"type": "integer"}, "stop": {}, "seed": {"type": "integer"}, "n": {"type": "integer"},
    "stream": {"type": "boolean"}, "stream_options": {"type": "object"}, "metadata": {"type": "object"}})
MESSAGES_SCHEMA = _body_schema(["model", "max_tokens", "messages"], {
    "model": {"type": "string"}, "max_tokens": {"type": "integer"}, "messages": _MESSAGES, "system": {},
    "tools": {"type": "array"}, "tool_choice": {"type": "object"}, "stop_sequences": {"type": "array"},
    "temperature": {"type": "number"}, "top_p": {"type": "number"}, "stream": {"type": "boolean"},
    "metadata": {"type": "object"}})
COUNT_SCHEMA = _body_schema(["model", "messages"], {"model": {"type": "string"}, "messages": _MESSAGES,
                                                   "system": {}, "tools": {"type": "array"}})


_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["type", "message"],
    "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}}}
_ERRORS = {"400": "Bad input (the field named)", "401": "No key, or not a valid one", "403": "The key's scope or "
           "owner does not allow it", "404": "No such model or object for this key", "409": "Conflicts with the "
           "object's state", "413": "The body is over the limit", "429": "Rate limit or a full queue (retry-after)",
           "503": "Not ready, or the engine is unavailable"}
_MEDIA = {"/v1/chat/completions": ("application/json", "text/event-stream"),
          "/v1/messages": ("application/json", "text/event-stream"),
          "/v1/captures/{name}": ("application/x-ndjson",), "/conversations/export": ("application/x-ndjson",),
          "/training/jobs/{job_id}/events": ("text/event-stream",), "/metrics": ("text/plain",)}


def document_answers(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema FastAPI generates, with what the routes really answer: each success in its media types, and the
    errors every route may give in the API's error shape (FastAPI's 422 never happens: a validation error is a
    400 here)."""
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            for code, answer in responses.items():
                if code.startswith("2") and code != "204":
                    answer["content"] = {m: {"schema": {}} for m in _MEDIA.get(path, ("application/json",))}
            for code, description in _ERRORS.items():
                if path in ("/healthz", "/readyz") and code != "503":
                    continue
                responses[code] = {"description": description, "content": {"application/json": {
                    "schema": _ERROR}}}
    return schema


class _DeclaredBodyLimit:
    """Plain ASGI: any request declaring a body over the limit is a 413 before routing, on every route (those that
    read a body also count what arrives, `json_body`)."""

    def __init__(self, inner, limit: int, render):
        self.inner, self.limit, self.render = inner, limit, render

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
            if declared.isdigit() and int(declared) > self.limit:
                return await self.render(scope, receive, send, declared.decode())
        return await self.inner(scope, receive, send)


def create_app(engine, *, keys: KeyStore | None, capture: Capture | None, settings: Settings | None = None,
               key_list: Callable[[], list[dict[str, Any]]] | None = None, db=None, jobs=None,
               confined=None) -> FastAPI:
    """The gateway over a started serving engine. `keys` None: no key is asked for (a loopback server). `db`: the
    state database (agents, the conversation index; None: those routes are absent); `jobs`: the training jobs;
    `confined`: the folders a client may name files in (`paths.Confined`)."""
    settings = settings or Settings()
    # the schema is served by a route of ours, behind a key like every route but health
    app = FastAPI(title="StateSet Agents gateway", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    buckets = _Buckets()
    limits = engine.limits()
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["authorization", "x-api-key", "content-type", CONVERSATION_HEADER])

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return _error(request, exc)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):
        kind = {404: "route_not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request")
        return _error(request, ApiError(kind, str(exc.detail), status=exc.status_code))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        return _error(request, ApiError("invalid_request", f"invalid request: {exc.errors()[:1]}"))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):  # a bug, never bad input: say so, keep serving
        return _error(request, ApiError("server", f"internal error: {type(exc).__name__}"))

    def authorize(request: Request, admin: bool = False, scope: str | None = None) -> Key:
        if keys is None:
            key = OPEN_KEY
        else:
            given = request.headers.get("x-api-key")
            auth = request.headers.get("authorization", "")
            if not given and auth[:7].lower() == "bearer ":
                given = auth[7:].strip()
            if not given:
                raise ApiError("authentication", "no API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'")
            key = keys.lookup(given)
            if key is None:
                raise ApiError("authentication", "the API key is not valid")
        if admin and not key.admin:
            raise ApiError("permission", f"this route needs an admin key; the key {key.id} has scope {key.scope!r}")
        if scope is not None and not has_scope(key.scope, scope):
            what = "training jobs need" if scope == "train" else "this route needs"
            raise ApiError("permission", f"{what} a {scope} (or higher) key; the key {key.id} has scope "
                                         f"{key.scope!r}")
        wait = buckets.take(key.id, key.rate_limit or settings.rate_limit)
        if wait:
            raise ApiError("rate_limit", f"rate limit of {key.rate_limit or settings.rate_limit} requests a minute "
                                         f"reached for key {key.id}", headers={"retry-after": str(math.ceil(wait))})
        return key

    async def json_body(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise ApiError("too_large", f"the body is {declared} bytes; the limit is {settings.max_body_bytes}")
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > settings.max_body_bytes:
                raise ApiError("too_large", f"the body is over the limit of {settings.max_body_bytes} bytes")
        try:
            return orjson.loads(bytes(data))
        except orjson.JSONDecodeError as exc:
            raise ApiError("invalid_request", f"the body is not valid JSON: {exc}") from None

    async def submit(request, events: _Events):
        try:
            return await asyncio.to_thread(engine.submit, request, events.emit)
        except InputError as exc:
            if exc.field == "model":
                raise ApiError("not_found", f"the model {request.model!r} does not exist; GET /v1/models lists "
                                            "the served models", param="model") from None
            raise ApiError("invalid_request", str(exc), param=exc.field) from None
        except ServerBusy as exc:
            raise ApiError("rate_limit", f"the server is busy: {exc}",
                           headers={"retry-after": str(math.ceil(exc.retry_after))}) from None

    async def collect(events: _Events, ticket) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        dones: list[dict[str, Any]] = []
        try:
            async for event in events:
                if event["type"] == "done":
                    dones.append(event)
                elif event["type"] == "end":
                    return dones, event
                elif event["type"] == "failed":
                    kind = "unavailable" if event.get("status") == 503 else "server"
                    raise ApiError(kind, event["message"])
        except asyncio.CancelledError:
            ticket.cancel()
            raise
        raise ApiError("server", "the engine ended the request without a reply")

    scorer = agents_api.Scorer()

    async def record(key: Key, conversation: str | None, captured: dict[str, Any], choices, usage,
                     agent: dict[str, Any] | None = None, api: str = "chat") -> None:
        count_tokens_served(captured["model"], usage)
        where_at = None
        if capture is not None:
            where_at = await asyncio.to_thread(capture.record_at, key.owner, conversation, captured, choices, usage)
        if db is not None:
            score = None
            if agent is not None:
                score = await asyncio.to_thread(scorer.score, agent, captured["messages"], choices[0]["message"])
            await asyncio.to_thread(conversations_api.index, db, owner=key.owner,
                                    agent=agent["name"] if agent else None, conversation_id=conversation,
                                    model=captured["model"], api=api, where_at=where_at, score=score, usage=usage)

    def streaming(body: AsyncIterator[bytes], ticket, finished: list, on_finish) -> StreamingResponse:
        async def run() -> AsyncIterator[bytes]:
            recorded = False
            try:
                async for chunk in body:
                    if finished and not recorded:
                        recorded = True
                        await on_finish(finished[0])
                    yield chunk
            finally:
                if not finished:
                    ticket.cancel()  # the client went away (or the stream failed): free its rows

        return StreamingResponse(run(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})

    from . import metrics

    count_tokens_served = metrics.install(app, stats=engine.stats, job_counts=jobs.counts if jobs else None,
                                          authorize=authorize)

    async def too_large(scope, receive, send, declared: str) -> None:
        request = Request(scope, receive)
        response = _error(request, ApiError("too_large", f"the body is {declared} bytes; the limit is "
                                                         f"{settings.max_body_bytes}"))
        await response(scope, receive, send)

    app.add_middleware(_DeclaredBodyLimit, limit=settings.max_body_bytes, render=too_large)

    @app.get("/openapi.json", include_in_schema=False)
    async def openapi(request: Request):
        authorize(request)
        if app.openapi_schema is None:
            app.openapi_schema = document_answers(app.openapi())
        return app.openapi_schema

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz():
        stats = engine.stats()
        return JSONResponse({"status": "ready" if stats.get("ready") else "not ready", **stats},
                            status_code=200 if stats.get("ready") else 503)

    @app.get("/v1/models")
    async def models(request: Request):
        authorize(request)
        return {"object": "list", "data": [
            {"id": m["id"], "object": "model", "created": 0, "owned_by": "stateset-agents",
             "kind": m["kind"], **settings.models.get(m["id"], {})} for m in engine.models()]}

    @app.post("/v1/chat/completions", openapi_extra=CHAT_SCHEMA)
    async def chat_completions(request: Request):
        key = authorize(request)
        gen, meta = chat_api.parse(await json_body(request), limits)
        shown = gen.model
        agent = agents_api.resolve(db, key, gen, meta["capture"]) if db is not None else None
        conversation = request.headers.get(CONVERSATION_HEADER) or meta["conversation_id"]
        events = _Events(asyncio.get_running_loop())
        ticket = await submit(gen, events)

        async def captured(body):
            await record(key, conversation, meta["capture"], chat_api.captured_choices(body), body["usage"], agent)

        if meta["stream"]:
            finished: list = []
            return streaming(chat_api.stream(shown, gen.n, meta["include_usage"], events, finished), ticket,
                             finished, captured)
        dones, end = await collect(events, ticket)
        body = chat_api.completion(shown, dones, end)
        await captured(body)
        return body

    @app.post("/v1/messages", openapi_extra=MESSAGES_SCHEMA)
    async def messages(request: Request):
        key = authorize(request)
        gen, meta = messages_api.parse(await json_body(request), limits)
        shown = gen.model
        agent = agents_api.resolve(db, key, gen, meta["capture"]) if db is not None else None
        conversation = request.headers.get(CONVERSATION_HEADER) or meta["conversation_id"]
        events = _Events(asyncio.get_running_loop())
        ticket = await submit(gen, events)

        async def captured(body, done=None):
            choice = {"index": 0, "message": messages_api.reply_of(body, done),
                      "finish_reason": {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
                                        "tool_use": "tool_calls"}[body["stop_reason"]]}
            usage = body["usage"]
            await record(key, conversation, meta["capture"], [choice],
                         {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"],
                          "total_tokens": usage["input_tokens"] + usage["output_tokens"]}, agent, "messages")

        if meta["stream"]:
            prompt_tokens = await asyncio.to_thread(engine.count_tokens, gen.messages, gen.tools)
            finished: list = []
            return streaming(messages_api.stream(shown, prompt_tokens, events, finished), ticket, finished,
                             captured)
        dones, end = await collect(events, ticket)
        body = messages_api.message(shown, dones[0], end)
        await captured(body, dones[0])
        return body

    @app.post("/v1/messages/count_tokens", openapi_extra=COUNT_SCHEMA)
    async def count_tokens(request: Request):
        authorize(request)
        model, chat_messages, tools = messages_api.parse_count(await json_body(request))
        if model not in {m["id"] for m in engine.models()}:
            raise ApiError("not_found", f"the model {model!r} does not exist; GET /v1/models lists the served "
                                        "models", param="model")
        try:
            return {"input_tokens": await asyncio.to_thread(engine.count_tokens, chat_messages, tools)}
        except InputError as exc:
            raise ApiError("invalid_request", str(exc), param=exc.field) from None

    @app.get("/v1/captures")
    async def captures(request: Request, owner: str | None = None):
        key = authorize(request)
        if capture is None:
            return {"object": "list", "data": [], "capture": "off"}
        if owner is not None and not key.admin and owner != key.owner:
            raise ApiError("permission", "an infer key sees only its own owner's captures")
        wanted = owner if owner is not None else (None if key.admin else key.owner)
        return {"object": "list", "data": capture.files(wanted), "redacted": capture.redact}

    @app.get("/v1/captures/{name}")
    async def capture_file(request: Request, name: str):
        key = authorize(request)
        path = capture.path_of(name, None if key.admin else key.owner) if capture is not None else None
        if path is None:
            raise ApiError("route_not_found", f"no capture file {name!r} for this key")
        return Response(await asyncio.to_thread(path.read_bytes), media_type="application/x-ndjson")

    @app.get("/v1/keys")
    async def list_keys(request: Request):
        authorize(request, admin=True)
        return {"object": "list", "data": key_list() if key_list else []}

    if db is not None:
        served = lambda: {m["id"] for m in engine.models()}  # noqa: E731
        agents_api.register(app, db, authorize, json_body, served, scorer, confined)
        conversations_api.register(app, db, authorize, capture)
    if jobs is not None:
        from . import jobs_api

        jobs_api.register(app, jobs, authorize, json_body)
    return app
