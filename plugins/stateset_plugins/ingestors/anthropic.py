"""`ingestor:anthropic`: Anthropic Messages API logs, normalised to OpenAI-shaped transcripts.

A line is a call log `{"request": {"system"?, "messages", "tools"?, ...}, "response": {"content": [...], ...}}`
(stitched with the other calls of its conversation, see `stitching`), or a whole conversation in the request's
shape `{"id"?, "system"?, "messages", "tools"?, "metadata"?}`.

Conversion (lossless; nothing the log carried is dropped):
* `system` (a string or text blocks) becomes a leading `system` message;
* `tool_use` blocks become the assistant's `tool_calls`, `input` serialised as the JSON `arguments` string;
* each `tool_result` block becomes a `tool` message with the `tool_call_id` it answers (`is_error` and other
  block keys kept on it);
* other blocks stay as content parts. Content that is exactly one plain text block becomes a string;
* tool schemas `{name, description, input_schema}` become `{"type": "function", "function": {name, description,
  parameters}}`; server tools (typed, without an input schema) are kept as logged.
"""
from __future__ import annotations

from typing import Any, Iterator

import orjson

from .log_ingestor import LogIngestor
from .messages import (
    LineError,
    Transcript,
    call_extras,
    check_tool_results,
    conversation_key,
    expect,
    log_id,
    message_role,
    normalise_message,
    optional_object,
    record_metadata,
)
from .stitching import Call

_ROLES = ("user", "assistant")
_RECORD_KEYS = ("id", "system", "messages", "tools")


class AnthropicIngestor(LogIngestor):
    """Anthropic Messages request/response logs and conversations."""

    name = "anthropic"
    version = "1.0.0"

    def parse_line(self, record: Any) -> Transcript | Call:
        expect(record, dict, None, "a line")
        if "request" in record:
            return _call(record)
        if "messages" in record:
            pairs = list(_conversation_messages(record, ""))
            messages = _checked(pairs)
            return Transcript(messages=messages, tools=_tools(record.get("tools"), "tools"),
                              metadata=record_metadata(record, _RECORD_KEYS),
                              id=log_id(record) or conversation_key(record))
        raise LineError("unknown_format", 'expected a call log ({"request": ..., "response": ...}) or a '
                                          'conversation ({"system"?, "messages": [...]})')


def _call(line: dict[str, Any]) -> Call:
    request = expect(line["request"], dict, "request", "request")
    response = line.get("response")
    if response is None:
        raise LineError("missing_field", "a call log needs the response", "response")
    expect(response, dict, "response", "response")
    if response.get("type") == "error" or ("error" in response and "content" not in response):
        raise LineError("error_response", f"the call failed: {str(response.get('error'))[:200]}", "response.error")
    if "content" not in response:
        raise LineError("missing_field", "the response has no content", "response.content")
    if response.get("role", "assistant") != "assistant":
        raise LineError("wrong_type", "a response must come from the assistant", "response.role")
    pairs = list(_conversation_messages(request, "request."))
    reply = list(_converted("assistant", response["content"], "response.content"))
    messages = _checked([*pairs, *reply])
    record = call_extras(line)
    record["request"] = {k: v for k, v in request.items() if k not in ("system", "messages", "tools")}
    record["response"] = {k: v for k, v in response.items() if k != "content"}
    return Call(key=conversation_key(line), request=messages[:-1], reply=messages[-1],
                tools=_tools(request.get("tools"), "request.tools"),
                metadata=optional_object(line, "metadata", "metadata"), record=record)


def _checked(pairs: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
    """Converted messages, each checked as an OpenAI message, tool results matched to their calls."""
    messages = [normalise_message(m, f) for m, f in pairs]
    check_tool_results(messages, lambda i: pairs[i][1], id_field="tool_use_id")
    return messages


def _conversation_messages(record: dict[str, Any], prefix: str) -> Iterator[tuple[dict[str, Any], str]]:
    system = record.get("system")
    if system not in (None, "", []):
        yield {"role": "system", "content": _content(system, f"{prefix}system", allowed=("text",))}, \
            f"{prefix}system"
    raw = record.get("messages")
    field = f"{prefix}messages"
    if raw is None or raw == []:
        raise LineError("no_messages", "no messages", field)
    expect(raw, list, field, "messages")
    for i, message in enumerate(raw):
        where = f"{field}[{i}]"
        expect(message, dict, where, "a message")
        role = message_role(message, where, _ROLES, "Anthropic messages are user or assistant")
        if "content" not in message:
            raise LineError("missing_field", f"a {role} message needs content", f"{where}.content")
        converted = list(_converted(role, message["content"], f"{where}.content"))
        extras = {k: v for k, v in message.items() if k not in ("role", "content")}
        if extras and converted:  # other keys of the logged message ride on the last message it became
            converted[-1][0].update(extras)
        yield from converted


def _converted(role: str, content: Any, field: str) -> Iterator[tuple[dict[str, Any], str]]:
    """One Anthropic message as OpenAI messages: an assistant turn, or user turns and tool results in order."""
    if isinstance(content, str):
        yield {"role": role, "content": content}, field
        return
    blocks = expect(content, list, field, "content")
    if role == "assistant":
        parts, calls = [], []
        for i, block in enumerate(blocks):
            kind = _block_type(block, f"{field}[{i}]")
            if kind == "tool_result":
                raise LineError("wrong_type", "a tool_result block belongs in a user message", f"{field}[{i}]")
            if kind == "tool_use":
                calls.append(_tool_call(block, f"{field}[{i}]"))
            else:
                parts.append(block)
        message: dict[str, Any] = {"role": "assistant", "content": _content(parts, field) if parts else None}
        if calls:
            message["tool_calls"] = calls
        yield message, field
        return
    pending: list[tuple[int, Any]] = []  # user blocks since the last tool result
    for i, block in enumerate(blocks):
        kind = _block_type(block, f"{field}[{i}]")
        if kind == "tool_use":
            raise LineError("wrong_type", "a tool_use block belongs in an assistant message", f"{field}[{i}]")
        if kind != "tool_result":
            pending.append((i, block))
            continue
        if pending:
            yield {"role": "user", "content": _content([b for _, b in pending], field)}, f"{field}[{pending[0][0]}]"
            pending = []
        yield _tool_result(block, f"{field}[{i}]"), f"{field}[{i}]"
    if pending or not blocks:
        where = f"{field}[{pending[0][0]}]" if pending else field
        yield {"role": "user", "content": _content([b for _, b in pending], field)}, where


def _block_type(block: Any, field: str) -> str:
    expect(block, dict, field, "a content block")
    kind = block.get("type")
    if not isinstance(kind, str):
        raise LineError("missing_field" if kind is None else "wrong_type", "a content block needs a string `type`",
                        f"{field}.type")
    if kind == "text":
        expect(block.get("text"), str, f"{field}.text", "a text block's `text`")
    return kind


def _content(blocks: Any, field: str, allowed: tuple[str, ...] | None = None) -> Any:
    """A string stays a string; so does exactly one plain text block. Anything else is kept as content parts."""
    if isinstance(blocks, str):
        return blocks
    expect(blocks, list, field, "content")
    for i, block in enumerate(blocks):
        kind = _block_type(block, f"{field}[{i}]")
        if allowed and kind not in allowed:
            raise LineError("wrong_type", f"only {', '.join(allowed)} blocks are allowed here", f"{field}[{i}]")
    if len(blocks) == 1 and blocks[0]["type"] == "text" and set(blocks[0]) == {"type", "text"}:
        return blocks[0]["text"]
    return list(blocks)


def _tool_call(block: dict[str, Any], field: str) -> dict[str, Any]:
    for key in ("id", "name"):
        if key not in block:
            raise LineError("missing_field", f"a tool_use block needs `{key}`", f"{field}.{key}")
        expect(block[key], str, f"{field}.{key}", f"a tool_use `{key}`")
    arguments = orjson.dumps(block.get("input", {})).decode()
    call = {"id": block["id"], "type": "function", "function": {"name": block["name"], "arguments": arguments}}
    call.update((k, v) for k, v in block.items() if k not in ("type", "id", "name", "input"))
    return call


def _tool_result(block: dict[str, Any], field: str) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if call_id is None:
        raise LineError("missing_field", "a tool_result needs the `tool_use_id` it answers", f"{field}.tool_use_id")
    expect(call_id, str, f"{field}.tool_use_id", "tool_use_id")
    content = _content(block["content"], f"{field}.content") if block.get("content") is not None else ""
    message = {"role": "tool", "content": content, "tool_call_id": call_id}
    message.update((k, v) for k, v in block.items() if k not in ("type", "tool_use_id", "content"))
    return message


def _tools(tools: Any, field: str) -> list[Any]:
    if tools is None:
        return []
    expect(tools, list, field, "tools")
    return [_tool(t, f"{field}[{i}]") for i, t in enumerate(tools)]


def _tool(tool: Any, field: str) -> Any:
    expect(tool, dict, field, "a tool schema")
    if tool.get("type") not in (None, "custom") and "input_schema" not in tool:
        return tool  # a server tool (web search, code execution, ...): nothing to translate
    name = tool.get("name")
    if not isinstance(name, str):
        raise LineError("missing_field" if name is None else "wrong_type", "a tool needs a name", f"{field}.name")
    function: dict[str, Any] = {"name": name}
    if "description" in tool:
        function["description"] = tool["description"]
    function["parameters"] = tool.get("input_schema", {"type": "object", "properties": {}})
    out: dict[str, Any] = {"type": "function", "function": function}
    out.update((k, v) for k, v in tool.items() if k not in ("type", "name", "description", "input_schema"))
    return out
