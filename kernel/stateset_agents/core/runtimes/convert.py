"""Plain dicts (the file formats) <-> contract messages. Round trips are exact: keys absent stay absent,
unknown keys ride in `extra_json`, and key order is restored canonically."""
from __future__ import annotations

from typing import Any, Mapping

import orjson

from ..contracts import common_pb2, reward_pb2

_MSG_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
_CONV_KEYS = ("id", "source", "messages", "tools", "metadata")
_SOURCE_KEYS = ("path", "sha256", "line")
_CALL_KEYS = ("id", "type", "function")


def _extra(d: Mapping[str, Any], known: tuple[str, ...]) -> bytes:
    if len(d) <= len(known) and all(k in known for k in d):
        return b""
    return orjson.dumps({k: v for k, v in d.items() if k not in known})


def _loads_obj(raw: bytes) -> dict:
    return orjson.loads(raw) if raw else {}


# ------------------------------------------------------------------------------------------------- tool calls
def tool_call_to_proto(call: Mapping[str, Any]) -> common_pb2.ToolCall:
    fn = call.get("function") or {}
    pb = common_pb2.ToolCall(name=str(fn.get("name", "")))
    if "id" in call:
        pb.id = str(call["id"])
    if "type" in call:
        pb.type = str(call["type"])
    if "arguments" in fn:
        args = fn["arguments"]
        if isinstance(args, str):
            pb.arguments = args
        else:
            pb.arguments_json = orjson.dumps(args)
    extra = {k: v for k, v in call.items() if k not in _CALL_KEYS}
    fn_extra = {k: v for k, v in fn.items() if k not in ("name", "arguments")}
    if extra or fn_extra:
        pb.extra_json = orjson.dumps({"call": extra, "function": fn_extra})
    return pb


def tool_call_from_proto(pb: common_pb2.ToolCall) -> dict[str, Any]:
    extra = _loads_obj(pb.extra_json)
    fn: dict[str, Any] = {"name": pb.name}
    if pb.HasField("arguments"):
        fn["arguments"] = pb.arguments
    elif pb.arguments_json:
        fn["arguments"] = orjson.loads(pb.arguments_json)
    fn.update(extra.get("function", {}))
    call: dict[str, Any] = {}
    if pb.HasField("id"):
        call["id"] = pb.id
    if pb.HasField("type"):
        call["type"] = pb.type
    call["function"] = fn
    call.update(extra.get("call", {}))
    return call


# --------------------------------------------------------------------------------------------------- messages
def message_to_proto(m: Mapping[str, Any]) -> common_pb2.ChatMessage:
    pb = common_pb2.ChatMessage(role=str(m.get("role", "")))
    if "content" in m:
        content = m["content"]
        if content is None:
            pb.content_null = True
        elif isinstance(content, str):
            pb.content_text = content
        else:
            pb.content_parts_json = orjson.dumps(content)
    if "tool_calls" in m:
        calls = m["tool_calls"]
        if isinstance(calls, list):
            pb.has_tool_calls = True
            pb.tool_calls.extend(tool_call_to_proto(c) for c in calls)
    if "tool_call_id" in m and m["tool_call_id"] is not None:
        pb.tool_call_id = str(m["tool_call_id"])
    if "name" in m and m["name"] is not None:
        pb.name = str(m["name"])
    extra = {k: v for k, v in m.items() if k not in _MSG_KEYS or (k in ("tool_call_id", "name") and v is None)
             or (k == "tool_calls" and not isinstance(v, list))}
    if extra:
        pb.extra_json = orjson.dumps(extra)
    return pb


def message_from_proto(pb: common_pb2.ChatMessage) -> dict[str, Any]:
    m: dict[str, Any] = {"role": pb.role}
    if pb.HasField("content_text"):
        m["content"] = pb.content_text
    elif pb.content_parts_json:
        m["content"] = orjson.loads(pb.content_parts_json)
    elif pb.content_null:
        m["content"] = None
    if pb.has_tool_calls:
        m["tool_calls"] = [tool_call_from_proto(c) for c in pb.tool_calls]
    if pb.HasField("tool_call_id"):
        m["tool_call_id"] = pb.tool_call_id
    if pb.HasField("name"):
        m["name"] = pb.name
    if pb.extra_json:
        m.update(orjson.loads(pb.extra_json))
    return m


# ---------------------------------------------------------------------------------------------- conversations
def conversation_to_proto(c: Mapping[str, Any]) -> common_pb2.Conversation:
    pb = common_pb2.Conversation(id=str(c.get("id", "")))
    source = c.get("source")
    if isinstance(source, Mapping):
        pb.has_source = True
        pb.source.path = str(source.get("path", ""))
        pb.source.sha256 = str(source.get("sha256", ""))
        pb.source.line = int(source.get("line", 0) or 0)
        extra = _extra(source, _SOURCE_KEYS)
        if extra:
            pb.source.extra_json = extra
    pb.messages.extend(message_to_proto(m) for m in c.get("messages") or ())
    if "tools" in c:
        pb.tools_json = orjson.dumps(c["tools"])
    if "metadata" in c:
        pb.metadata_json = orjson.dumps(c["metadata"])
    extra = {k: v for k, v in c.items() if k not in _CONV_KEYS or (k == "source" and not isinstance(v, Mapping))}
    if extra:
        pb.extra_json = orjson.dumps(extra)
    return pb


def conversation_from_proto(pb: common_pb2.Conversation) -> dict[str, Any]:
    c: dict[str, Any] = {"id": pb.id}
    if pb.has_source:
        src: dict[str, Any] = {"path": pb.source.path, "sha256": pb.source.sha256, "line": pb.source.line}
        if pb.source.extra_json:
            src.update(orjson.loads(pb.source.extra_json))
        c["source"] = src
    c["messages"] = [message_from_proto(m) for m in pb.messages]
    if pb.tools_json:
        c["tools"] = orjson.loads(pb.tools_json)
    if pb.metadata_json:
        c["metadata"] = orjson.loads(pb.metadata_json)
    if pb.extra_json:
        c.update(orjson.loads(pb.extra_json))
    return c


# ------------------------------------------------------------------------------------------------------ grades
def grade_to_proto(g: Mapping[str, Any]) -> reward_pb2.Grade:
    r = g["reward"]
    return reward_pb2.Grade(
        conversation_id=g["conversation_id"], turn_index=g["turn_index"], score=g["score"],
        applicable=g["applicable"], breakdown_json=orjson.dumps(g["breakdown"]), reason=g["reason"],
        reward=reward_pb2.RewardIdentity(name=r["name"], version=r["version"], config_sha256=r["config_sha256"]))


def grade_from_proto(pb: reward_pb2.Grade) -> dict[str, Any]:
    return {
        "conversation_id": pb.conversation_id, "turn_index": pb.turn_index, "score": pb.score,
        "applicable": pb.applicable, "breakdown": orjson.loads(pb.breakdown_json) if pb.breakdown_json else {},
        "reason": pb.reason,
        "reward": {"name": pb.reward.name, "version": pb.reward.version, "config_sha256": pb.reward.config_sha256},
    }


def config_to_proto(config: Mapping[str, Any] | None, sha256: str) -> common_pb2.ComponentConfig:
    return common_pb2.ComponentConfig(json=orjson.dumps(dict(config or {})), sha256=sha256)


def event_to_proto(event: Mapping[str, Any]) -> common_pb2.Event:
    payload = {k: v for k, v in event.items() if k != "type"}
    return common_pb2.Event(type=str(event.get("type", "")), json=orjson.dumps(payload, default=str))


def event_from_proto(pb: common_pb2.Event) -> dict[str, Any]:
    out = {"type": pb.type}
    if pb.json:
        payload = orjson.loads(pb.json)
        if not isinstance(payload, dict):
            raise TypeError(f"an event's JSON must be an object, not {type(payload).__name__}")
        out.update(payload)
    return out
