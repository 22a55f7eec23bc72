"""/agents: an agent is a name, a system prompt, tools, the model or deployed adapter it answers with, and
optionally a reward (a reward component with its policy or config) that scores each reply live. ``model:
"agent:NAME"`` in either inference API answers as the caller's owner's agent NAME: the system prompt goes first,
the agent's tools are offered unless the request names its own, and the reply is graded by the reward.

An agent belongs to the owner of the key that created it; another owner's agent is a 404 (its existence is not
told); an admin key sees every owner's (``?owner=`` narrows the list).
"""
from __future__ import annotations

import asyncio
import re
import secrets
import threading
import time
from typing import Any, Callable

from fastapi import FastAPI, Request, Response

from ..core.errors import InputError, StatesetError
from . import chat_api
from .db import Database, encode, where
from .errors import ApiError, bad, field
from .paths import Confined

PREFIX = "agent:"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
AGENT_SCHEMA = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["name", "model"], "properties": {
        "name": {"type": "string"}, "system_prompt": {"type": "string"}, "tools": {"type": "array"},
        "model": {"type": "string"},
        "reward": {"type": "object", "properties": {"name": {"type": "string"}, "config": {"type": "object"}}}}}}}}}
PATCH_SCHEMA = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "properties": AGENT_SCHEMA["requestBody"]["content"]["application/json"]["schema"][
        "properties"]}}}}}


def public(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "object": "agent", "name": row["name"], "owner": row["owner"],
            "system_prompt": row["system_prompt"], "tools": row["tools"], "model": row["model"],
            "reward": row["reward"], "created_at": row["created_at"], "updated_at": row["updated_at"]}


def _reward(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad("'reward' must be an object {'name': REWARD, 'config': {...}}", "reward")
    name = field(value, "name", "string", required=True, where="reward.")
    config = field(value, "config", "object", default={}, where="reward.")
    if not name.removeprefix("reward:"):
        raise bad("'reward.name' names a reward component", "reward.name")
    return {"name": name if name.startswith("reward:") else f"reward:{name}", "config": config}


def check_agent(body: Any, models: set[str], *, partial: bool = False, confined: Confined | None = None
                ) -> dict[str, Any]:
    """The agent's fields from a create (or, `partial`, an update) body, each checked; a path in the reward's
    config must lie inside the server's roots (`confined`)."""
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object")
    out: dict[str, Any] = {}
    unknown = set(body) - {"name", "system_prompt", "tools", "model", "reward"}
    if unknown:
        raise bad(f"unknown field {sorted(unknown)[0]!r}; an agent has name, system_prompt, tools, model, reward",
                  sorted(unknown)[0])
    if not partial or "name" in body:
        name = field(body, "name", "string", required=True)
        if not _NAME.match(name):
            raise bad("an agent name is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit",
                      "name")
        out["name"] = name
    if not partial or "model" in body:
        model = field(body, "model", "string", required=True)
        if model not in models:
            raise ApiError("not_found", f"the model {model!r} is not served here; GET /v1/models lists them",
                           param="model")
        out["model"] = model
    if not partial or "system_prompt" in body:
        out["system_prompt"] = field(body, "system_prompt", "string", default="")
    if not partial or "tools" in body:
        out["tools"] = chat_api.check_tools(body.get("tools"))
    if not partial or "reward" in body:
        out["reward"] = _reward(body.get("reward"))
        if out["reward"] is not None:
            (confined or Confined()).scan(out["reward"]["config"], "reward.config")
    return out


class Scorer:
    """Each agent's reward, loaded once per version of the agent and shared; grading runs in a worker thread."""

    def __init__(self):
        self._loaded: dict[tuple[str, float], Any] = {}
        self._lock = threading.Lock()

    def _component(self, agent: dict[str, Any]):
        from ..core.runtimes import load_component

        key = (agent["id"], agent["updated_at"])
        with self._lock:
            if key not in self._loaded:
                spec = agent["reward"]
                self._loaded[key] = load_component(spec["name"], config=dict(spec.get("config") or {}))
            return self._loaded[key]

    def check(self, agent: dict[str, Any]) -> None:
        """Load the reward now, so a bad name or config is the create's 400, not every reply's silence."""
        if agent.get("reward"):
            try:
                self._component(agent)
            except (InputError, StatesetError, KeyError, ValueError, TypeError) as exc:
                raise bad(f"the reward cannot be loaded: {exc}", "reward") from None

    def score(self, agent: dict[str, Any], messages: list[dict[str, Any]], reply: dict[str, Any]
              ) -> dict[str, Any] | None:
        """The reply's grade row (score, applicable, breakdown, reason, reward identity), or an error record."""
        if not agent.get("reward"):
            return None
        from ..core.components import GradeItem

        conversation = {"id": "live", "messages": [*messages, {k: v for k, v in reply.items() if v is not None}]}
        try:
            rows = self._component(agent).grade([GradeItem(conversation, [len(messages)])])
        except Exception as exc:  # a reward that fails on a reply never fails the reply: it is recorded
            return {"score": None, "error": f"{type(exc).__name__}: {exc}"}
        row = rows[0]
        return {"score": row["score"] if row["applicable"] else None, "applicable": row["applicable"],
                "breakdown": row["breakdown"], "reason": row["reason"], "reward": row["reward"]}


def lookup(db: Database, owner: str, name: str) -> dict[str, Any] | None:
    return db.one("SELECT * FROM agents WHERE owner = ? AND name = ?", (owner, name))


def resolve(db: Database, key, gen, captured: dict[str, Any]) -> dict[str, Any] | None:
    """For a request naming ``agent:NAME``: the agent (the key owner's), with `gen` and the capture's request
    rewritten in place to what the agent answers with; None for a plain model."""
    if not gen.model.startswith(PREFIX):
        return None
    name = gen.model[len(PREFIX):]
    agent = lookup(db, key.owner, name)
    if agent is None:
        raise ApiError("not_found", f"no agent {name!r} for owner {key.owner!r}; GET /agents lists yours",
                       param="model")
    messages = list(gen.messages)
    if agent["system_prompt"]:
        messages = [{"role": "system", "content": agent["system_prompt"]}, *messages]
    tools = gen.tools if captured.get("tools") else list(agent["tools"])
    gen.model, gen.messages, gen.tools = agent["model"], messages, tools
    captured.update(model=agent["model"], messages=messages)
    if tools:
        captured["tools"] = tools
    captured["metadata"] = {**(captured.get("metadata") or {}), "agent": name}
    return agent


def register(app: FastAPI, db: Database, authorize: Callable, json_body: Callable, models: Callable[[], set[str]],
             scorer: Scorer, confined: Confined | None = None) -> None:
    def visible(key, agent_id: str) -> dict[str, Any]:
        row = db.one("SELECT * FROM agents WHERE id = ?", (agent_id,))
        if row is None or (not key.admin and row["owner"] != key.owner):
            raise ApiError("route_not_found", f"no agent {agent_id!r} for this key")
        return row

    @app.post("/agents", status_code=201, openapi_extra=AGENT_SCHEMA)
    async def create_agent(request: Request):
        key = authorize(request, scope="infer")
        agent = check_agent(await json_body(request), models(), confined=confined)
        now = time.time()
        row = {"id": f"agt_{secrets.token_hex(8)}", "owner": key.owner, **agent, "created_at": now,
               "updated_at": now}
        await asyncio.to_thread(scorer.check, row)
        if lookup(db, key.owner, agent["name"]) is not None:
            raise ApiError("conflict", f"owner {key.owner!r} already has an agent {agent['name']!r}", param="name")
        db.execute("INSERT INTO agents (id, owner, name, system_prompt, tools, model, reward, created_at, updated_at)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (row["id"], row["owner"], row["name"], row["system_prompt"], encode(row["tools"]), row["model"],
                    encode(row["reward"]), now, now))
        return public(row)

    @app.get("/agents")
    async def list_agents(request: Request, owner: str | None = None):
        key = authorize(request, scope="infer")
        if owner is not None and not key.admin and owner != key.owner:
            raise ApiError("permission", "a key sees only its own owner's agents")
        clause, params = where([("owner = ?", owner if owner is not None else (None if key.admin else key.owner))])
        rows = db.query(f"SELECT * FROM agents{clause} ORDER BY created_at", params)
        return {"object": "list", "data": [public(r) for r in rows]}

    @app.get("/agents/{agent_id}")
    async def get_agent(request: Request, agent_id: str):
        return public(visible(authorize(request, scope="infer"), agent_id))

    @app.patch("/agents/{agent_id}", openapi_extra=PATCH_SCHEMA)
    async def update_agent(request: Request, agent_id: str):
        key = authorize(request, scope="infer")
        row = visible(key, agent_id)
        changes = check_agent(await json_body(request), models(), partial=True, confined=confined)
        if "name" in changes and changes["name"] != row["name"] and lookup(db, row["owner"], changes["name"]):
            raise ApiError("conflict", f"owner {row['owner']!r} already has an agent {changes['name']!r}",
                           param="name")
        row = {**row, **changes, "updated_at": max(time.time(), row["updated_at"] + 1e-6)}
        await asyncio.to_thread(scorer.check, row)
        db.execute("UPDATE agents SET name = ?, system_prompt = ?, tools = ?, model = ?, reward = ?, updated_at = ? "
                   "WHERE id = ?", (row["name"], row["system_prompt"], encode(row["tools"]), row["model"],
                                    encode(row["reward"]), row["updated_at"], agent_id))
        return public(row)

    @app.delete("/agents/{agent_id}", status_code=204)
    async def delete_agent(request: Request, agent_id: str):
        visible(authorize(request, scope="infer"), agent_id)
        db.execute("DELETE FROM agents WHERE id = ?", (agent_id,))
        return Response(status_code=204)
