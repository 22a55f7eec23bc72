"""`ingestor:openai`: OpenAI chat logs.

A line is one of:
* a conversation: `{"id"?, "messages": [...], "tools"?, "metadata"?}` (other top-level keys go into metadata);
* a bare list of messages;
* a call log, one API call a line: `{"request": {"messages", "tools", ...}, "response": {"choices": [{"message"}]}}`,
  stitched with the other calls of its conversation (see `stitching`).
"""
from __future__ import annotations

from typing import Any

from .log_ingestor import LogIngestor
from .messages import (
    LineError,
    Transcript,
    call_extras,
    check_tool_results,
    conversation_key,
    expect,
    log_id,
    normalise_message,
    normalise_messages,
    normalise_tools,
    optional_object,
    record_metadata,
)
from .stitching import Call

_RECORD_KEYS = ("id", "messages", "tools")
_REPLY_FIELD = "response.choices[0].message"


class OpenAIIngestor(LogIngestor):
    """OpenAI chat messages, conversations and request/response call logs."""

    name = "openai"
    version = "1.0.0"

    def parse_line(self, record: Any) -> Transcript | Call:
        if isinstance(record, list):
            return _transcript(record, "", tools=[], metadata={}, id=None)
        expect(record, dict, None, "a line")
        if "request" in record:
            return _call(record)
        if "messages" in record:
            return _transcript(record["messages"], "messages", tools=normalise_tools(record.get("tools"), "tools"),
                               metadata=record_metadata(record, _RECORD_KEYS),
                               id=log_id(record) or conversation_key(record))
        raise LineError("unknown_format", 'expected a conversation ({"messages": [...]}), a list of messages, or a '
                                          'call log ({"request": ..., "response": ...})')


def _transcript(raw: Any, field: str, **rest: Any) -> Transcript:
    messages = normalise_messages(raw, field)
    check_tool_results(messages, lambda i: f"{field}[{i}]")
    return Transcript(messages=messages, **rest)


def _call(line: dict[str, Any]) -> Call:
    request = expect(line["request"], dict, "request", "request")
    response = line.get("response")
    if response is None:
        raise LineError("missing_field", "a call log needs the response", "response")
    expect(response, dict, "response", "response")
    if "error" in response and "choices" not in response:
        raise LineError("error_response", f"the call failed: {str(response['error'])[:200]}", "response.error")
    choices = response.get("choices")
    if not choices:
        raise LineError("missing_field", "the response has no choices", "response.choices")
    expect(choices, list, "response.choices", "choices")
    choice = expect(choices[0], dict, "response.choices[0]", "a choice")
    if not isinstance(choice.get("message"), dict):
        raise LineError("missing_field", "the first choice has no message", _REPLY_FIELD)
    reply = normalise_message({"role": "assistant", **choice["message"]}, _REPLY_FIELD)
    if reply["role"] != "assistant":
        raise LineError("wrong_type", f"a reply must be an assistant message, not {reply['role']}",
                        f"{_REPLY_FIELD}.role")
    messages = normalise_messages(request.get("messages"), "request.messages")
    check_tool_results([*messages, reply],
                       lambda i: f"request.messages[{i}]" if i < len(messages) else _REPLY_FIELD)
    # Everything about the call but the messages and tools, which the transcript already holds.
    record = call_extras(line)
    record["request"] = {k: v for k, v in request.items() if k not in ("messages", "tools")}
    record["response"] = {**response, "choices": [{k: v for k, v in choice.items() if k != "message"},
                                                  *choices[1:]]}
    return Call(key=conversation_key(line), request=messages, reply=reply,
                tools=normalise_tools(request.get("tools"), "request.tools"),
                metadata=optional_object(line, "metadata", "metadata"), record=record)
