"""The one text form of tool calls, used in prompts, completions and parsed generations.

Many chat templates (SmolLM2's among them) print only ``content`` and drop ``tool_calls``, so a turn that only calls
a tool would train on empty text. Before templating, every message is rewritten into plain text:

* an assistant tool call becomes one line per call, appended to the content::

      <tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>

  (``arguments`` is the parsed JSON object when the logged string parses, else the string as logged);
* a tool result keeps role ``tool``; its content is the result text (``tool_call_id`` is dropped);
* declared tools are described in the system message, inside ``<tools>[...]</tools>``, with one sentence naming
  the call form above (a system message is added when the conversation has none).

`parse_assistant` inverts the first rule on generated text, so the reward sees an OpenAI-shaped assistant message
with ``tool_calls`` and no markup in ``content``.
"""
from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

from stateset_agents.plugin_api.text import content_text

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL_RE = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)
TOOLS_PREAMBLE = ("You can call these tools. To call one, write "
                  '<tool_call>{"name": NAME, "arguments": {...}}</tool_call> on its own line.')


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw if raw is not None else {}


def render_tool_call(call: Mapping[str, Any]) -> str:
    fn = call.get("function") or {}
    body = {"name": fn.get("name", ""), "arguments": _arguments(fn.get("arguments"))}
    return TOOL_CALL_OPEN + json.dumps(body, ensure_ascii=False) + TOOL_CALL_CLOSE


def to_text_message(message: Mapping[str, Any]) -> dict[str, str]:
    """One OpenAI-shaped message as {role, content} with tool calls in the text form."""
    role = message.get("role", "user")
    text = content_text(message.get("content"))
    calls = message.get("tool_calls") or []
    if calls:
        lines = [render_tool_call(c) for c in calls]
        text = "\n".join(([text] if text else []) + lines)
    return {"role": role, "content": text}


def to_text_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None
                     ) -> list[dict[str, str]]:
    out = [to_text_message(m) for m in messages]
    if tools:
        described = TOOLS_PREAMBLE + "\n<tools>" + json.dumps(list(tools), ensure_ascii=False) + "</tools>"
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": (out[0]["content"] + "\n\n" + described).strip()}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out


def parse_assistant(text: str) -> dict[str, Any]:
    """Generated text -> OpenAI-shaped assistant message. Calls whose JSON does not parse stay in the content."""
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in _CALL_RE.finditer(text):
        try:
            body = json.loads(match.group(1))
            name = body["name"]
            if not isinstance(name, str) or not isinstance(body, dict):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            continue  # not a call: leave it in the content for the reward to judge
        kept.append(text[last:match.start()])
        last = match.end()
        args = body.get("arguments", {})
        calls.append({"id": f"call_{len(calls)}", "type": "function",
                      "function": {"name": name,
                                   "arguments": args if isinstance(args, str) else json.dumps(args,
                                                                                           ensure_ascii=False)}})
    kept.append(text[last:])
    content = "".join(kept).strip()
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    return message


def same_call(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Name and arguments equal, arguments compared as parsed JSON (key order and spacing do not matter)."""
    fa, fb = a.get("function") or {}, b.get("function") or {}
    return fa.get("name") == fb.get("name") and _arguments(fa.get("arguments")) == _arguments(fb.get("arguments"))
