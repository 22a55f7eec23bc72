"""POST /v1/chat/completions: the OpenAI Chat Completions request checked and turned into a `GenerationRequest`,
and the engine's events rendered as a completion or as SSE chunks (ending ``data: [DONE]``).

Supported: ``messages`` (text or text parts, assistant ``tool_calls``, ``tool`` results), ``tools``,
``tool_choice`` (``none`` leaves the tools out of the prompt; ``auto`` renders them; ``required`` and a named
function also force a call: the reply starts with the call's opening markup, see the serving engine), ``temperature``, ``top_p``, ``max_tokens`` /
``max_completion_tokens``, ``stop``, ``seed``, ``n``, ``stream``, ``stream_options.include_usage``, ``metadata``
(``conversation_id`` stitches the capture) and vLLM's ``ignore_eos``. Other fields are accepted and ignored, as
the API ignores what a model does not support; ``logprobs`` is refused (not computed here).
"""
from __future__ import annotations

import json
import secrets
import time
from typing import Any, AsyncIterator

from ..plugin_api.serving import GenerationRequest
from .errors import ApiError, bad, field, number_in, positive, stops

ROLES = ("system", "developer", "user", "assistant", "tool")
DEFAULT_MAX_TOKENS = 256


def _text_content(content: Any, where: str, *, nullable: bool = False) -> None:
    if content is None and nullable:
        return
    if isinstance(content, str):
        return
    if isinstance(content, list) and content:
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise bad("only text content parts ({'type': 'text', 'text': ...}) are supported",
                          f"{where}.content[{i}]")
        return
    raise bad("'content' must be a string or a non-empty list of text parts", f"{where}.content")


def _tool_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise bad("'tool_calls' must be an array", f"{where}.tool_calls")
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if not isinstance(call, dict):
            raise bad("a tool call must be an object", at)
        field(call, "id", "string", required=True, where=f"{at}.")
        fn = field(call, "function", "object", required=True, where=f"{at}.")
        field(fn, "name", "string", required=True, where=f"{at}.function.")
        field(fn, "arguments", "string", required=True, where=f"{at}.function.")


def check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise bad("'messages' must be a non-empty array", "messages")
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad("a message must be an object", where)
        role = m.get("role")
        if role not in ROLES:
            raise bad(f"'role' must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role")
        if role == "assistant":
            if m.get("tool_calls") is not None:
                _tool_calls(m["tool_calls"], where)
            _text_content(m.get("content"), where, nullable=bool(m.get("tool_calls")))
        else:
            _text_content(m.get("content"), where)
        if role == "tool":
            field(m, "tool_call_id", "string", required=True, where=f"{where}.")
        if m.get("name") is not None:
            field(m, "name", "string", where=f"{where}.")
    if messages[-1]["role"] == "assistant":
        raise bad("the last message is the assistant's: nothing to answer (prefilling is not supported)",
                  f"messages[{len(messages) - 1}]")
    return messages


def check_tools(tools: Any, where: str = "tools") -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad(f"'{where}' must be an array", where)
    for i, tool in enumerate(tools):
        at = f"{where}[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise bad("a tool must be {'type': 'function', 'function': {...}}", at)
        fn = field(tool, "function", "object", required=True, where=f"{at}.")
        field(fn, "name", "string", required=True, where=f"{at}.function.")
        if fn.get("parameters") is not None:
            field(fn, "parameters", "object", where=f"{at}.function.")
    return tools


def _tool_choice(value: Any, tools: list[dict[str, Any]]) -> tuple[str, str | None]:
    """(the choice, the forced tool: "" for any, its name for a named one, None when the model is free)."""
    if value is None:
        return ("auto" if tools else "none"), None
    if value in ("none", "auto", "required"):
        if value == "required" and not tools:
            raise bad("tool_choice 'required' needs tools", "tool_choice")
        return value, ("" if value == "required" else None)
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("function"), dict):
        name = value["function"].get("name")
        if not any((t.get("function") or {}).get("name") == name for t in tools):
            raise bad(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
        return "function", name
    raise bad("'tool_choice' must be 'none', 'auto', 'required' or {'type': 'function', 'function': {'name'}}",
              "tool_choice")


def parse(body: Any, limits: dict[str, int]) -> tuple[GenerationRequest, dict[str, Any]]:
    """(the engine's request, what the route needs besides: stream, include_usage, the capture's request)."""
    if not isinstance(body, dict):
        raise bad("the body must be a JSON object")
    model = field(body, "model", "string", required=True)
    messages = check_messages(body.get("messages"))
    tools = check_tools(body.get("tools"))
    choice, force = _tool_choice(body.get("tool_choice"), tools)
    if body.get("logprobs"):
        raise bad("logprobs are not supported by this server", "logprobs")
    most = limits["max_new_tokens"]
    max_tokens = positive(body, "max_completion_tokens", most=most) or positive(body, "max_tokens", most=most) \
        or min(DEFAULT_MAX_TOKENS, most)
    n = positive(body, "n", default=1, most=limits["max_batch"])
    seed = field(body, "seed", "integer")
    stream = field(body, "stream", "boolean", default=False)
    options = field(body, "stream_options", "object", default={})
    metadata = field(body, "metadata", "object", default={})
    conversation = metadata.get("conversation_id")
    if conversation is not None and not isinstance(conversation, str):
        raise bad("'metadata.conversation_id' must be a string", "metadata.conversation_id")
    request = GenerationRequest(
        model=model, messages=messages, tools=tools if choice != "none" else [], max_tokens=max_tokens,
        temperature=number_in(body, "temperature", 0.0, 2.0, 1.0), top_p=number_in(body, "top_p", 0.0, 1.0, 1.0,
                                                                                   low_open=True),
        stop=stops(body.get("stop"), "stop"), seed=seed, n=n,
        ignore_eos=field(body, "ignore_eos", "boolean", default=False), force_tool=force)
    captured = {"model": model, "messages": messages}
    if tools:
        captured["tools"] = tools
    for key in ("tool_choice", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "n",
                "metadata"):
        if body.get(key) is not None:
            captured[key] = body[key]
    return request, {"stream": stream, "include_usage": bool(field(options, "include_usage", "boolean",
                                                                   where="stream_options.", default=False)),
                     "conversation_id": conversation, "capture": captured}


def _with_ids(message: dict[str, Any]) -> dict[str, Any]:
    """Tool calls get ids unique to this response (the parser numbers them call_0, call_1, ...)."""
    if message.get("tool_calls"):
        message = {**message, "tool_calls": [{**c, "id": f"call_{secrets.token_hex(12)}"}
                                             for c in message["tool_calls"]]}
    return message


def finish_reason(done: dict[str, Any]) -> str:
    return "tool_calls" if done["message"].get("tool_calls") else done["finish_reason"]


def usage(end: dict[str, Any]) -> dict[str, int]:
    return {"prompt_tokens": end["prompt_tokens"], "completion_tokens": end["completion_tokens"],
            "total_tokens": end["prompt_tokens"] + end["completion_tokens"]}


def completion(model: str, dones: list[dict[str, Any]], end: dict[str, Any], *, fresh_ids: bool = True
               ) -> dict[str, Any]:
    choices = [{"index": d["index"], "message": _with_ids(d["message"]) if fresh_ids else d["message"], "finish_reason": finish_reason(d),
                "logprobs": None} for d in sorted(dones, key=lambda d: d["index"])]
    return {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": usage(end)}


def captured_choices(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"index": c["index"], "message": c["message"], "finish_reason": c["finish_reason"]}
            for c in body["choices"]]


def sse(data: Any) -> bytes:
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


async def stream(model: str, n: int, include_usage: bool, events: AsyncIterator[dict[str, Any]],
                 finished: list) -> AsyncIterator[bytes]:
    """SSE chunks; appends the completion's body to `finished` once every choice is done (for the capture)."""
    head = {"id": f"chatcmpl-{secrets.token_hex(12)}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}

    def chunk(index: int, delta: dict[str, Any], reason: str | None = None) -> bytes:
        return sse({**head, "choices": [{"index": index, "delta": delta, "finish_reason": reason,
                                         "logprobs": None}]})

    for i in range(n):
        yield chunk(i, {"role": "assistant", "content": ""})
    dones = []
    async for event in events:
        if event["type"] == "delta":
            yield chunk(event["index"], {"content": event["content"]})
        elif event["type"] == "done":
            message = _with_ids(event["message"])
            dones.append({**event, "message": message})
            if message.get("tool_calls"):
                yield chunk(event["index"], {"tool_calls": [{"index": j, **call} for j, call in
                                                            enumerate(message["tool_calls"])]})
            yield chunk(event["index"], {}, finish_reason(event))
        elif event["type"] == "end":
            if include_usage:
                yield sse({**head, "choices": [], "usage": usage(event)})
            finished.append(completion(model, dones, event, fresh_ids=False))
        elif event["type"] == "failed":
            yield sse(ApiError("server" if event.get("status", 500) >= 500 else "invalid_request",
                               event["message"]).chat_body())
            break
    yield b"data: [DONE]\n\n"
