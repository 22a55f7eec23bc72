"""Tool-call helpers shared by `tool_calling` and `nsr`: which tools only read, which calls took effect, and a quick
check of arguments against a simple JSON schema."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any, Iterable

from stateset_agents.plugin_api.text import message_text

from ._text import is_error_result, tool_result

# A tool whose name starts with one of these verbs only reads or thinks; it changes nothing for the user.
READ_VERBS = ("get", "list", "search", "find", "lookup", "look", "fetch", "read", "query", "check", "calculate",
              "compute", "think", "view", "show", "describe", "retrieve", "count", "validate", "verify")
# A hand-off moves the user to a person; it changes no data either, so it is judged by escalation rules, not here.
HANDOFF_VERBS = ("transfer", "escalate", "handoff", "hand")


_WORD_BREAK = re.compile(r"[_\-.\s]|(?<=[a-z])(?=[A-Z])")


@lru_cache(maxsize=4096)
def tool_verb(tool_name: str) -> str:
    """A tool name's first word, lower-cased: its verb ("cancel_reservation", "cancelReservation" -> "cancel")."""
    return _WORD_BREAK.split(tool_name, maxsplit=1)[0].lower()


def declared_tools(conversation: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """name -> OpenAI function declaration, from conversation["tools"] (either `{"type","function"}` or bare)."""
    declared = {}
    for tool in conversation.get("tools") or ():
        function = tool.get("function", tool) if type(tool) is dict or isinstance(tool, Mapping) else None
        if (type(function) is dict or isinstance(function, Mapping)) and function.get("name"):
            declared[function["name"]] = function
    return declared


def tool_kind(name: str, declaration: Mapping[str, Any] | None = None, *,
              read_only: Iterable[str] = (), writes: Iterable[str] = ()) -> str:
    """"read", "handoff" or "write". Explicit lists win, then a declared readOnlyHint, then the name's verb."""
    if writes and name in set(writes):
        return "write"
    if read_only and name in set(read_only):
        return "read"
    hints = (declaration or {}).get("annotations") or {}
    if hints and isinstance(hints, Mapping) and "readOnlyHint" in hints:
        return "read" if hints["readOnlyHint"] else "write"
    verb = tool_verb(name)
    if verb in READ_VERBS:
        return "read"
    if verb in HANDOFF_VERBS:
        return "handoff"
    return "write"


@lru_cache(maxsize=4096)
def name_kind(name: str, read_only: tuple[str, ...] = (), writes: tuple[str, ...] = ()) -> str:
    """`tool_kind` of a tool declared without annotations, or not at all: its name decides, so each is judged once."""
    return tool_kind(name, None, read_only=read_only, writes=writes)


def call_outcome(messages: Sequence[Mapping[str, Any]], turn_index: int, call_id: Any) -> str:
    """"ok", "error" or "unknown": read from the tool result that follows the call (the call's visible effect)."""
    result = tool_result(messages, call_id, turn_index + 1)
    if result is None:
        return "unknown"
    return "error" if is_error_result(message_text(result)) else "ok"


# JSON schema keywords `simply_valid` decides, and those that only annotate.
_SIMPLE_KEYWORDS = frozenset(("type", "properties", "required", "additionalProperties", "items", "enum"))
_ANNOTATIONS = frozenset(("description", "title", "default", "examples", "$comment", "deprecated", "readOnly",
                          "writeOnly"))
_TYPES = {"object": lambda v: type(v) is dict, "array": lambda v: type(v) is list, "string": lambda v: type(v) is str,
          "boolean": lambda v: type(v) is bool, "null": lambda v: v is None,
          "number": lambda v: type(v) in (int, float),
          "integer": lambda v: type(v) is int or (type(v) is float and v.is_integer())}


def simply_valid(schema: Any, value: Any) -> bool:
    """True when `value` surely satisfies `schema` using only common keywords (type, properties, required,
    additionalProperties, items, string enums); False when it fails them or the schema needs more: then the
    full validator decides (and words the problem). Most tool schemas are this simple, and it is much faster."""
    if schema is True or schema == {}:
        return True
    if type(schema) is not dict or not _SIMPLE_KEYWORDS.issuperset(k for k in schema if k not in _ANNOTATIONS):
        return False
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if type(kind) is list else [kind]
        if not any(k in _TYPES and _TYPES[k](value) for k in kinds):
            return False
    if "enum" in schema:
        options = schema["enum"]
        if type(options) is not list or not all(type(o) is str for o in options) or value not in options:
            return False
    if type(value) is dict:
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if type(properties) is not dict or type(required) is not list or not all(k in value for k in required):
            return False
        for key, item in value.items():
            if key in properties:
                if not simply_valid(properties[key], item):
                    return False
            elif extra is not True and not simply_valid(extra, item):
                return False
    elif type(value) is list and "items" in schema:
        return all(simply_valid(schema["items"], item) for item in value)
    return True
