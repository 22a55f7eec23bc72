"""Writing test logs: JSONL files, and OpenAI / Anthropic call logs made from an OpenAI-shaped conversation."""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable

from stateset_agents.core.jsonio import load_json


def write_jsonl(path: Path, lines: Iterable[Any], gz: bool = False) -> Path:
    """Each item a line: objects as JSON, strings verbatim (to write broken lines)."""
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(text.encode(), mtime=0) if gz else text.encode())
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def read_outputs(out: Path) -> tuple[list[dict], list[dict], dict]:
    return read_jsonl(out / "transcripts.jsonl"), read_jsonl(out / "rejects.jsonl"), load_json(
        out / "ingest_summary.json")


def assistant_indices(messages: list[dict]) -> list[int]:
    return [i for i, m in enumerate(messages) if m["role"] == "assistant"]


def openai_calls(messages: list[dict], tools: list | None = None, **line_keys: Any) -> list[dict]:
    """One call log line per assistant turn: the messages before it as the request, the turn as the reply (with
    the extra fields a real response carries, which a client drops when it sends the turn back)."""
    calls = []
    for n, i in enumerate(assistant_indices(messages)):
        reply = {**messages[i], "refusal": None, "annotations": []}
        calls.append({
            **line_keys,
            "request": {"model": "gpt-test", "messages": messages[:i], **({"tools": tools} if tools else {})},
            "response": {"id": f"chatcmpl-{n}", "object": "chat.completion", "model": "gpt-test",
                         "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": i, "completion_tokens": 1}},
        })
    return calls


def to_anthropic(messages: list[dict]) -> tuple[str | None, list[dict]]:
    """An OpenAI-shaped conversation as Anthropic (system, messages): tool calls as tool_use blocks, tool results
    as tool_result blocks in a user turn."""
    system, out = None, []
    for m in messages:
        if m["role"] == "system":
            system = m["content"]
        elif m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        else:
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"])} for c in m.get("tool_calls") or ()]
            out.append({"role": "assistant", "content": blocks})
    return system, out


def anthropic_tools(openai_tools: list[dict]) -> list[dict]:
    return [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
             "input_schema": t["function"]["parameters"]} for t in openai_tools]


def anthropic_calls(messages: list[dict], tools: list | None = None, **line_keys: Any) -> list[dict]:
    """One Anthropic call log line per assistant turn."""
    system, converted = to_anthropic(messages)
    calls = []
    for n, i in enumerate(assistant_indices(converted)):
        request = {"model": "claude-test", "max_tokens": 1024, "messages": converted[:i]}
        if system is not None:
            request["system"] = system
        if tools:
            request["tools"] = anthropic_tools(tools)
        calls.append({**line_keys, "request": request,
                      "response": {"id": f"msg_{n}", "type": "message", "role": "assistant",
                                   "content": converted[i]["content"], "stop_reason": "end_turn",
                                   "usage": {"input_tokens": i, "output_tokens": 1}}})
    return calls


def interleave(*streams: list) -> list:
    """Round-robin merge, as calls of concurrent conversations land in one log."""
    out, longest = [], max(len(s) for s in streams)
    for k in range(longest):
        out.extend(s[k] for s in streams if k < len(s))
    return out


def essence(messages: list[dict]) -> list[tuple]:
    """A conversation as Anthropic logs can carry it: text, tool calls (ids, names, arguments as parsed JSON) and
    tool results with their call ids. Hashable, to compare conversations as sets."""
    def turn(m: dict) -> tuple:
        calls = tuple((c["id"], c["function"]["name"], json.dumps(json.loads(c["function"]["arguments"]),
                                                                  sort_keys=True))
                      for c in m.get("tool_calls") or ())
        return m["role"], m.get("content") or None, calls, m.get("tool_call_id")
    return tuple(turn(m) for m in messages)
