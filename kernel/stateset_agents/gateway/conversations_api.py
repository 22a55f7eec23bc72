"""/conversations: the index of captured calls (one row per served call: owner, agent, model, the live score,
token counts, and where its line lies in the capture), and ``GET /conversations/export``, which streams the
selected calls' capture lines as they were written: ingest's input format, so `stateset-agents ingest --format
<the OpenAI log ingestor> --input EXPORT.jsonl` reads an export as it is.

Filters: ``agent``, ``since`` / ``until`` (Unix seconds), ``min_score`` / ``max_score``, ``owner`` (admin only),
``limit`` (at most 1000, newest first for the list; the export is oldest first, every match).
"""
from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from .db import Database, encode, where
from .errors import ApiError

MAX_LIMIT = 1000


def index(db: Database, *, owner: str, agent: str | None, conversation_id: str | None, model: str, api: str,
          where_at: tuple[Path, int, int] | None, score: dict[str, Any] | None, usage: dict[str, Any]) -> str:
    """Add one served call to the index; its id."""
    row_id = f"conv_{secrets.token_hex(10)}"
    file, offset, length = (where_at[0].name, where_at[1], where_at[2]) if where_at else (None, None, None)
    db.execute("INSERT INTO conversations (id, owner, agent, conversation_id, model, api, file, line_offset, "
               "line_bytes, score, score_detail, prompt_tokens, completion_tokens, created_at) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
               (row_id, owner, agent, conversation_id, model, api, file, offset, length,
                (score or {}).get("score"), encode(score), usage.get("prompt_tokens"),
                usage.get("completion_tokens"), time.time()))
    return row_id


def public(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "object": "conversation", "owner": row["owner"], "agent": row["agent"],
            "conversation_id": row["conversation_id"], "model": row["model"], "api": row["api"],
            "score": row["score"], "score_detail": row["score_detail"],
            "usage": {"prompt_tokens": row["prompt_tokens"], "completion_tokens": row["completion_tokens"]},
            "capture": {"file": row["file"], "offset": row["line_offset"], "bytes": row["line_bytes"]}
            if row["file"] else None, "created_at": row["created_at"]}


def _number(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ApiError("invalid_request", f"'{name}' must be a number, got {value!r}", param=name) from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ApiError("invalid_request", f"'{name}' must be a finite number", param=name)
    return number


def _line(capture, row: dict[str, Any]) -> bytes | None:
    path = capture.path_of(row["file"], row["owner"]) if capture is not None and row["file"] else None
    if path is None:
        return None
    with open(path, "rb") as f:
        f.seek(row["line_offset"])
        return f.read(row["line_bytes"])


def register(app: FastAPI, db: Database, authorize: Callable, capture) -> None:
    def selected(request: Request, key, *, newest_first: bool, limit: int | None) -> list[dict[str, Any]]:
        q = request.query_params
        owner = q.get("owner")
        if owner is not None and not key.admin and owner != key.owner:
            raise ApiError("permission", "a key sees only its own owner's conversations")
        clause, params = where([
            ("owner = ?", owner if owner is not None else (None if key.admin else key.owner)),
            ("agent = ?", q.get("agent")), ("created_at >= ?", _number(q.get("since"), "since")),
            ("created_at <= ?", _number(q.get("until"), "until")),
            ("score >= ?", _number(q.get("min_score"), "min_score")),
            ("score <= ?", _number(q.get("max_score"), "max_score"))])
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT * FROM conversations{clause} ORDER BY created_at {order}, id {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return db.query(sql, params)

    def limit_of(request: Request) -> int:
        value = _number(request.query_params.get("limit"), "limit")
        if value is None:
            return 100
        if value != int(value) or not 1 <= value <= MAX_LIMIT:
            raise ApiError("invalid_request", f"'limit' must be an integer in [1, {MAX_LIMIT}]", param="limit")
        return int(value)

    @app.get("/conversations")
    async def list_conversations(request: Request, agent: str | None = None, since: str | None = None,
                                 until: str | None = None, min_score: str | None = None,
                                 max_score: str | None = None, owner: str | None = None, limit: str | None = None):
        key = authorize(request, scope="infer")
        rows = await asyncio.to_thread(selected, request, key, newest_first=True, limit=limit_of(request))
        return {"object": "list", "data": [public(r) for r in rows]}

    @app.get("/conversations/export")
    async def export_conversations(request: Request, agent: str | None = None, since: str | None = None,
                                   until: str | None = None, min_score: str | None = None,
                                   max_score: str | None = None, owner: str | None = None):
        key = authorize(request, scope="infer")
        rows = await asyncio.to_thread(selected, request, key, newest_first=False, limit=None)

        async def lines() -> AsyncIterator[bytes]:
            for row in rows:
                data = await asyncio.to_thread(_line, capture, row)
                if data:
                    yield data

        return StreamingResponse(lines(), media_type="application/x-ndjson",
                                 headers={"content-disposition": 'attachment; filename="conversations.jsonl"'})

    @app.get("/conversations/{conversation}")
    async def get_conversation(request: Request, conversation: str):
        key = authorize(request, scope="infer")
        row = db.one("SELECT * FROM conversations WHERE id = ?", (conversation,))
        if row is None or (not key.admin and row["owner"] != key.owner):
            raise ApiError("route_not_found", f"no conversation {conversation!r} for this key")
        body = public(row)
        data = await asyncio.to_thread(_line, capture, row)
        if data:
            import orjson

            body["record"] = orjson.loads(data)
        return body
