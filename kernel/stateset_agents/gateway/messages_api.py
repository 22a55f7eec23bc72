"""POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages request checked and turned into the
engine's OpenAI-shaped request (system text first; ``tool_use`` blocks become assistant tool calls and
``tool_result`` blocks tool messages), and the engine's events rendered as a message or as the Messages stream
(message_start, content_block_start / delta / stop per block, message_delta, message_stop).

Supported: ``model``, ``max_tokens`` (required, as in the API), ``messages`` (text, ``tool_use``, ``tool_result``
blocks), ``system`` (text or text blocks), ``tools`` (``input_schema``), ``tool_choice`` (``none`` leaves the tools
out of the prompt), ``stop_sequences``, ``temperature`` (0-1), ``top_p``, ``stream``, ``metadata``
(``conversation_id`` stitches the capture). ``top_k`` is accepted and ignored.
"""
from __future__ import annotations

import json
import secrets
from typing import Any, AsyncIterator

from ..plugin_api.serving import GenerationRequest
from .errors import ApiError, bad, field, number_in, positive, stops

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise bad("'content' must be a string or a non-empty array of content blocks", where)
    for i, block in enumerate(content):
        at = f"{where}[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            field(block, "text", "string", required=True, where=f"{at}.")
        elif kind == "tool_use":
            field(block, "id", "string", required=True, where=f"{at}.")
            field(block, "name", "string", required=True, where=f"{at}.")
            field(block, "input", "object", required=True, where=f"{at}.")
        elif kind == "tool_result":
            field(block, "tool_use_id", "string", required=True, where=f"{at}.")
            inner = block.get("content")
            if inner is not None and not isinstance(inner, str):
                _text_only(inner, f"{at}.content")
        else:
            raise bad("only text, tool_use and tool_result blocks are supported", f"{at}.type")
    return content


def _text_only(blocks: Any, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list) or not all(isinstance(b, dict) and b.get("type") == "text"
                                               and isinstance(b.get("text"), str) for b in blocks):
        raise bad("must be a string or an array of text blocks", where)
    return "".join(b["text"] for b in blocks)


def to_chat_messages(system: Any, messages: Any) -> list[dict[str, Any]]:
    """Messages API turns -> OpenAI-shaped messages, in order."""
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty array", "messages")
    out: list[dict[str, Any]] = []
    if system is not None:
        text = _text_only(system, "system")
        if text:
            out.append({"role": "system", "content": text})
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant"):
            raise bad("a message is an object with role 'user' or 'assistant'", f"{where}.role")
        blocks = _blocks(m.get("content"), f"{where}.content")
        text = "".join(b["text"] for b in blocks if b["type"] == "text")
        if m["role"] == "assistant":
            calls = [{"id": b["id"], "type": "function",
                      "function": {"name": b["name"], "arguments": json.dumps(b["input"], ensure_ascii=False)}}
                     for b in blocks if b["type"] == "tool_use"]
            message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
            if calls:
                message["tool_calls"] = calls
            out.append(message)
            continue
        for b in blocks:
            if b["type"] == "tool_result":
                out.append({"role": "tool", "content": _text_only(b.get("content") or "", where),
                            "tool_call_id": b["tool_use_id"]})
            elif b["type"] == "tool_use":
                raise bad("tool_use blocks belong to assistant messages", f"{where}.content")
        if text:
            out.append({"role": "user", "content": text})
    if out[-1]["role"] == "assistant":
        raise bad("the last message is the assistant's: prefilling is not supported", "messages")
    return out


def to_chat_tools(tools: Any) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad("'tools' must be an array", "tools")
    out = []
    for i, tool in enumerate(tools):
        at = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise bad("a tool must be an object", at)
        name = field(tool, "name", "string", required=True, where=f"{at}.")
        schema = field(tool, "input_schema", "object", required=True, where=f"{at}.")
        fn: dict[str, Any] = {"name": name, "parameters": schema}
        if tool.get("description") is not None:
            fn["description"] = field(tool, "description", "string", where=f"{at}.")
        out.append({"type": "function", "function": fn})
    return out


def parse_count(body: Any) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object")
    model = field(body, "model", "string", required=True)
    return model, to_chat_messages(body.get("system"), body.get("messages")), to_chat_tools(body.get("tools"))


def _forced_tool(choice: dict[str, Any], tools: list[dict[str, Any]]) -> str | None:
    """`any` forces some tool ("") and `tool` the named one; `auto`, `none` and no choice leave the model free."""
    kind = choice.get("type")
    if kind not in ("any", "tool"):
        return None
    if not tools:
        raise bad(f"tool_choice {kind!r} needs tools", "tool_choice")
    if kind == "any":
        return ""
    name = choice.get("name")
    if not any(t["function"]["name"] == name for t in tools):
        raise bad(f"tool_choice names {name!r}, which is not among the tools", "tool_choice.name")
    return name


def parse(body: Any, limits: dict[str, int]) -> tuple[GenerationRequest, dict[str, Any]]:
    model, messages, tools = parse_count(body)
    max_tokens = positive(body, "max_tokens", most=limits["max_new_tokens"])
    if max_tokens is None:
        raise bad("'max_tokens' is required", "max_tokens")
    choice = field(body, "tool_choice", "object", default={})
    if choice and choice.get("type") not in ("auto", "any", "tool", "none"):
        raise bad("'tool_choice.type' must be auto, any, tool or none", "tool_choice.type")
    force = _forced_tool(choice, tools)
    metadata = field(body, "metadata", "object", default={})
    conversation = metadata.get("conversation_id")
    if conversation is not None and not isinstance(conversation, str):
        raise bad("'metadata.conversation_id' must be a string", "metadata.conversation_id")
    field(body, "top_k", "integer")
    request = GenerationRequest(
        model=model, messages=messages, tools=[] if choice.get("type") == "none" else tools, max_tokens=max_tokens,
        temperature=number_in(body, "temperature", 0.0, 1.0, 1.0),
        top_p=number_in(body, "top_p", 0.0, 1.0, 1.0, low_open=True),
        stop=stops(body.get("stop_sequences"), "stop_sequences", most=8), seed=None, n=1, force_tool=force)
    captured: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        captured["tools"] = tools
    for key in ("max_tokens", "temperature", "top_p", "metadata"):
        if body.get(key) is not None:
            captured[key] = body[key]
    if request.stop:
        captured["stop"] = list(request.stop)
    return request, {"stream": field(body, "stream", "boolean", default=False), "conversation_id": conversation,
                     "capture": captured}


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": message["content"]}] if message.get("content") else []
    for call in message.get("tool_calls") or []:
        try:
            arguments = json.loads(call["function"]["arguments"])
        except ValueError:
            arguments = None
        blocks.append({"type": "tool_use", "id": f"toolu_{secrets.token_hex(12)}", "name": call["function"]["name"],
                       "input": arguments if isinstance(arguments, dict) else {"arguments": call["function"]
                                                                                ["arguments"]}})
    return blocks


def stop_reason(done: dict[str, Any]) -> str:
    if done["message"].get("tool_calls"):
        return "tool_use"
    if done.get("stop_sequence"):
        return "stop_sequence"
    return STOP_REASONS[done["finish_reason"]]


def message(model: str, done: dict[str, Any], end: dict[str, Any], blocks: list[dict[str, Any]] | None = None
            ) -> dict[str, Any]:
    return {"id": f"msg_{secrets.token_hex(12)}", "type": "message", "role": "assistant", "model": model,
            "content": blocks if blocks is not None else content_blocks(done["message"]),
            "stop_reason": stop_reason(done), "stop_sequence": done.get("stop_sequence"),
            "usage": {"input_tokens": end["prompt_tokens"], "output_tokens": end["completion_tokens"]}}


def reply_of(body: dict[str, Any], done: dict[str, Any]) -> dict[str, Any]:
    """The reply as the capture holds it: OpenAI-shaped, tool call ids as the client saw them."""
    text = "".join(b["text"] for b in body["content"] if b["type"] == "text")
    calls = [{"id": b["id"], "type": "function",
              "function": {"name": b["name"], "arguments": json.dumps(b["input"], ensure_ascii=False)}}
             for b in body["content"] if b["type"] == "tool_use"]
    reply: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        reply["tool_calls"] = calls
    return reply


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + json.dumps({"type": name, **data}, ensure_ascii=False).encode() + \
        b"\n\n"


async def stream(model: str, prompt_tokens: int, events: AsyncIterator[dict[str, Any]], finished: list
                 ) -> AsyncIterator[bytes]:
    msg_id = f"msg_{secrets.token_hex(12)}"
    yield event("message_start", {"message": {
        "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": None,
        "stop_sequence": None, "usage": {"input_tokens": prompt_tokens, "output_tokens": 0}}})
    text_open = False
    index = 0
    done: dict[str, Any] | None = None
    async for ev in events:
        if ev["type"] == "delta":
            if not text_open:
                yield event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
                text_open = True
            yield event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": ev["content"]}})
        elif ev["type"] == "done":
            done = ev
            if text_open:
                yield event("content_block_stop", {"index": 0})
                index = 1
            blocks = content_blocks(ev["message"])
            for block in blocks:
                if block["type"] != "tool_use":
                    continue
                yield event("content_block_start", {"index": index, "content_block": {**block, "input": {}}})
                yield event("content_block_delta", {"index": index, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}})
                yield event("content_block_stop", {"index": index})
                index += 1
            done["blocks"] = blocks
        elif ev["type"] == "end" and done is not None:
            finished.append({**message(model, done, ev, done["blocks"]), "id": msg_id})  # captured before the end
            yield event("message_delta", {"delta": {"stop_reason": stop_reason(done),
                                                    "stop_sequence": done.get("stop_sequence")},
                                          "usage": {"output_tokens": ev["completion_tokens"]}})
            yield event("message_stop", {})
        elif ev["type"] == "failed":
            kind = "server" if ev.get("status", 500) >= 500 else "invalid_request"
            yield b"event: error\ndata: " + json.dumps(ApiError(kind, ev["message"]).messages_body()).encode() + \
                b"\n\n"
            return
