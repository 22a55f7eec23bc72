"""Checking and normalising OpenAI-shaped messages, shared by every log format.

A message comes out with its keys in the contract's canonical order (role, content, tool_calls, tool_call_id, name,
then any other key the log carried), so a conversation is byte-identical whichever runtime served the ingestor.
Nothing is dropped: unknown keys ride along, tool-call arguments stay exactly as logged.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from stateset_agents import Reject
from stateset_agents.core.jsonio import canonical_json

ROLES = ("system", "developer", "user", "assistant", "tool")
MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
#: Where a call log may carry the id of the conversation it belongs to, looked up in this order.
CONVERSATION_ID_KEYS = ("conversation_id", "session_id", "thread_id")


class LineError(Exception):
    """Why one log line cannot be ingested; becomes a `Reject` with the file and line filled in."""

    def __init__(self, reason: str, detail: str, field: str | None = None):
        super().__init__(detail)
        self.reason, self.detail, self.field = reason, detail, field or None

    def reject(self, path: str, line: int) -> Reject:
        return Reject(path=path, line=line, reason=self.reason, detail=self.detail, field=self.field)


_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
               type(None): "null"}


def type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def expect(value: Any, kinds: type | tuple[type, ...], field: str | None, what: str) -> Any:
    """`value` if it is one of `kinds` (a JSON boolean is not a number here), else a `wrong_type` LineError."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join(_TYPE_NAMES[k] for k in kinds)
        raise LineError("wrong_type", f"{what} must be {wanted}, got {type_name(value)}", field)
    return value


def optional_object(record: Mapping[str, Any], key: str, field: str) -> dict[str, Any]:
    """`record[key]` as a dict: absent or null is empty, anything but an object is a wrong type."""
    value = record.get(key)
    if value is None:
        return {}
    return dict(expect(value, dict, field, key))


def log_id(record: Mapping[str, Any]) -> str | None:
    """A conversation id as the log gave it (numbers become strings, so ids are uniform downstream)."""
    value = record.get("id")
    if value is None or value == "":
        return None
    expect(value, (str, int), "id", "id")
    return str(value)


def record_metadata(record: Mapping[str, Any], consumed: tuple[str, ...]) -> dict[str, Any]:
    """The log's `metadata`, plus any other top-level key the line carried (nothing is dropped; `metadata`'s own
    keys win a clash)."""
    metadata = optional_object(record, "metadata", "metadata")
    for key, value in record.items():
        if key not in consumed and key != "metadata":
            metadata.setdefault(key, value)
    return metadata


def call_extras(line: Mapping[str, Any]) -> dict[str, Any]:
    """A call log line's own keys besides the request, the response and the metadata (ids, timestamps, ...)."""
    return {k: v for k, v in line.items() if k not in ("request", "response", "metadata")}


def conversation_key(line: Mapping[str, Any]) -> str | None:
    """The conversation id of a call log line, if it has one: top level, then its `metadata`, then the request's
    `metadata` (the OpenAI and Anthropic APIs both accept one)."""
    request = line.get("request")
    places = (line, line.get("metadata"), request.get("metadata") if isinstance(request, Mapping) else None)
    for place in places:
        if not isinstance(place, Mapping):
            continue
        for key in CONVERSATION_ID_KEYS:
            value = place.get(key)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "":
                return str(value)
    return None


# ------------------------------------------------------------------------------------------------ message checks


def check_content(content: Any, field: str) -> None:
    """A string, or an array of typed parts (`{"type": "text", "text": ...}`, images, ...)."""
    if isinstance(content, str):
        return
    expect(content, list, field, "content")
    for i, part in enumerate(content):
        expect(part, dict, f"{field}[{i}]", "a content part")
        if not isinstance(part.get("type"), str):
            raise LineError("wrong_type" if "type" in part else "missing_field",
                            "a content part needs a string `type`", f"{field}[{i}].type")
        if part["type"] == "text":
            expect(part.get("text"), str, f"{field}[{i}].text", "a text part's `text`")


def normalise_tool_call(call: Any, field: str) -> dict[str, Any]:
    expect(call, dict, field, "a tool call")
    if "id" in call:
        expect(call["id"], str, f"{field}.id", "a tool call id")
    if "type" in call:
        expect(call["type"], str, f"{field}.type", "a tool call type")
    function = call.get("function")
    if function is None:
        raise LineError("missing_field", "a tool call needs a `function` with a name", f"{field}.function")
    expect(function, dict, f"{field}.function", "`function`")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise LineError("missing_field" if name is None else "wrong_type", "a tool call needs a function name",
                        f"{field}.function.name")
    if "arguments" not in function:
        raise LineError("missing_field", "a tool call needs `arguments`", f"{field}.function.arguments")
    # Strings are kept verbatim (even when not valid JSON); some loggers record the parsed object instead.
    expect(function["arguments"], (str, dict, list), f"{field}.function.arguments", "arguments")
    out: dict[str, Any] = {k: call[k] for k in ("id", "type") if k in call}
    out["function"] = {"name": name, "arguments": function["arguments"],
                       **{k: v for k, v in function.items() if k not in ("name", "arguments")}}
    out.update((k, v) for k, v in call.items() if k not in ("id", "type", "function"))
    return out


# The key sequences of a message already in canonical form: `role` first, then any of the other contract keys in
# their order, and nothing else.
_CANONICAL_SHAPES = frozenset(("role", *(k for i, k in enumerate(MESSAGE_KEYS[1:]) if mask >> i & 1))
                              for mask in range(1 << (len(MESSAGE_KEYS) - 1)))
_CONTRACT_KEYS = frozenset(MESSAGE_KEYS)
_PLAIN_CALL = ("id", "type", "function")
_PLAIN_FUNCTION = ("name", "arguments")


def _plain_message(message: dict[str, Any]) -> dict[str, Any] | None:
    """What `normalise_message` returns for the common case, without building what need not be built: the message
    itself when it is already canonical, else its contract keys in canonical order. None for anything unusual
    (content parts, a null `tool_calls`, extra keys, anything invalid): that takes the full path, which also
    reports errors."""
    keys = tuple(message)
    canonical = keys in _CANONICAL_SHAPES
    if not canonical and not _CONTRACT_KEYS.issuperset(keys):
        return None
    role = message.get("role")
    content = message.get("content")
    if content.__class__ is not str and (content is not None or role != "assistant"):
        return None
    if role == "tool":
        if message.get("tool_call_id").__class__ is not str:
            return None
    elif role not in ROLES:
        return None
    name = message.get("name")
    if name is not None and name.__class__ is not str:
        return None
    if "tool_calls" in message:
        calls = message["tool_calls"]
        if role != "assistant" or calls.__class__ is not list:
            return None
        for call in calls:
            if call.__class__ is not dict or tuple(call) != _PLAIN_CALL:
                return None
            function = call["function"]
            if (call["id"].__class__ is not str or call["type"].__class__ is not str
                    or function.__class__ is not dict or tuple(function) != _PLAIN_FUNCTION
                    or function["name"].__class__ is not str or not function["name"]
                    or function["arguments"].__class__ is not str):
                return None
    return message if canonical else {k: message[k] for k in MESSAGE_KEYS if k in message}


def message_role(message: dict[str, Any], field: str, roles: Any, expected: str) -> str:
    """The message's role, which must be one of `roles`; `expected` says which (for the error). Raises LineError."""
    role = message.get("role")
    if role is None:
        raise LineError("missing_field", "a message needs a `role`", f"{field}.role")
    if role not in roles:
        raise LineError("unknown_role", f"unknown role {role!r}; {expected}", f"{field}.role")
    return role


def normalise_message(message: Any, field: str) -> dict[str, Any]:
    """Check one OpenAI-shaped message and return it with canonical key order. Raises LineError. A message that
    is already canonical is returned as it is (the caller owns it: it was parsed from the line)."""
    if message.__class__ is dict and (plain := _plain_message(message)) is not None:
        return plain
    return _normalise_full(message, field)


def _normalise_full(message: Any, field: str) -> dict[str, Any]:
    """`normalise_message` without its fast path: every check, with the error for anything invalid."""
    expect(message, dict, field, "a message")
    role = message_role(message, field, ROLES, f"expected one of {', '.join(ROLES)}")
    if "content" in message and message["content"] is not None:
        check_content(message["content"], f"{field}.content")
    elif role != "assistant":  # only an assistant turn may be all tool calls
        raise LineError("missing_field" if "content" not in message else "wrong_type",
                        f"a {role} message needs content", f"{field}.content")
    out: dict[str, Any] = {"role": role}
    if "content" in message:
        out["content"] = message["content"]
    if "tool_calls" in message and message["tool_calls"] is not None:
        calls = expect(message["tool_calls"], list, f"{field}.tool_calls", "tool_calls")
        if role != "assistant":
            raise LineError("wrong_type", f"only assistant messages carry tool_calls, not {role}",
                            f"{field}.tool_calls")
        out["tool_calls"] = [normalise_tool_call(c, f"{field}.tool_calls[{i}]") for i, c in enumerate(calls)]
    if role == "tool":
        call_id = message.get("tool_call_id")
        if call_id is None:
            raise LineError("missing_field", "a tool result needs the `tool_call_id` of its call",
                            f"{field}.tool_call_id")
        expect(call_id, str, f"{field}.tool_call_id", "tool_call_id")
    if "tool_call_id" in message:
        out["tool_call_id"] = message["tool_call_id"]
    if message.get("name") is not None:
        expect(message["name"], str, f"{field}.name", "name")
    if "name" in message:
        out["name"] = message["name"]
    out.update((k, v) for k, v in message.items() if k not in MESSAGE_KEYS)
    return out


def normalise_messages(messages: Any, field: str) -> list[dict[str, Any]]:
    """A checked list of messages; the list itself must be a non-empty array."""
    if messages is None:
        raise LineError("no_messages", "no messages", field)
    expect(messages, list, field, "messages")
    if not messages:
        raise LineError("no_messages", "the message list is empty", field)
    # The fast path inline, so the field of a message is formatted only for one that needs the full check.
    out = []
    for i, m in enumerate(messages):
        plain = _plain_message(m) if m.__class__ is dict else None
        out.append(plain if plain is not None else _normalise_full(m, f"{field}[{i}]"))
    return out


def check_tool_results(messages: Sequence[Mapping[str, Any]], field_of: Callable[[int], str],
                       id_field: str = "tool_call_id") -> None:
    """Every tool result must answer a tool call made earlier in the conversation. `field_of(i)` locates message i
    in the log (asked only to report an error), `id_field` names the log's key for the call id."""
    called: set[str] = set()
    for i, message in enumerate(messages):
        calls = message.get("tool_calls")
        if calls:
            for call in calls:
                if isinstance(call.get("id"), str):
                    called.add(call["id"])
        if message["role"] == "tool" and message["tool_call_id"] not in called:
            raise LineError("orphan_tool_result",
                            f"tool result for call {message['tool_call_id']!r}, which no earlier assistant "
                            "message made", f"{field_of(i)}.{id_field}")


def normalise_tools(tools: Any, field: str) -> list[Any]:
    """Tool schemas are kept as logged; they must be an array of objects."""
    if tools is None:
        return []
    expect(tools, list, field, "tools")
    if not all(tool.__class__ is dict for tool in tools):  # the common case without a field name per tool
        for i, tool in enumerate(tools):
            expect(tool, dict, f"{field}[{i}]", "a tool schema")
    return list(tools)


# --------------------------------------------------------------------------------------------------- stitching


def _content_identity(content: Any) -> Any:
    # A reply's content may come back in the next request as a string or as text parts, "" or null.
    if content in (None, ""):
        return None
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" and
                                         isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content) or None
    return content


def message_identity(message: Mapping[str, Any]) -> bytes:
    """What must match for a message echoed in a later request to count as the same turn. Clients drop fields
    such as `refusal: null` or `annotations` when they send a reply back, so only the substance is compared."""
    calls = [(c.get("id"), c["function"]["name"], c["function"]["arguments"])
             for c in message.get("tool_calls") or ()]
    return canonical_json([message["role"], _content_identity(message.get("content")), calls,
                           message.get("tool_call_id"), message.get("name")])


def prefix_digests(messages: Iterable[Mapping[str, Any]], start: bytes = b"") -> list[bytes]:
    """Digest i identifies messages[:i + 1]; extending a conversation extends its digest chain."""
    out, state = [], start
    for message in messages:
        state = hashlib.sha256(state + message_identity(message)).digest()
        out.append(state)
    return out


@dataclass
class Transcript:
    """One complete conversation parsed from one line."""

    messages: list[dict[str, Any]]
    tools: list[Any]
    metadata: dict[str, Any]
    id: str | None = None

    def conversation(self, path: str, sha256: str, line: int) -> dict[str, Any]:
        conv: dict[str, Any] = {"id": self.id} if self.id else {}
        conv.update(source={"path": path, "sha256": sha256, "line": line}, messages=self.messages,
                    tools=self.tools, metadata=self.metadata)
        return conv
