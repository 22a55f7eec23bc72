"""One chat reply: the decoding settings of a chat turn and the completed event built from the generated ids, the
same for `evaluator:chat` (a local model) and a provider that samples elsewhere (River's chat sessions)."""
from __future__ import annotations

from typing import Any, Mapping

from stateset_agents.core.errors import InputError
from stateset_agents.plugin_api.text import content_text

from .chat_format import parse_assistant

#: Chat decodes with some temperature by default: greedy replies of small models loop.
CHAT_DEFAULTS = {"temperature": 0.7, "max_new_tokens": 256, "seed": 0, "max_prompt_tokens": 2048}
_POSITIVE = ("max_new_tokens", "max_prompt_tokens")


def decoding_of(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request's decoding settings, CHAT_DEFAULTS where it leaves one unset; an InputError naming the field
    for a value no model can decode with."""
    decoding = {k: request.get(k) if request.get(k) is not None else default for k, default in CHAT_DEFAULTS.items()}
    for key in _POSITIVE:
        if not isinstance(decoding[key], int) or isinstance(decoding[key], bool) or decoding[key] < 1:
            raise InputError(f"{key} must be a positive integer, got {decoding[key]!r}", field=key)
    if not isinstance(decoding["seed"], int) or isinstance(decoding["seed"], bool):
        raise InputError(f"seed must be an integer, got {decoding['seed']!r}", field="seed")
    if not isinstance(decoding["temperature"], (int, float)) or decoding["temperature"] < 0:
        raise InputError(f"temperature must be a number >= 0, got {decoding['temperature']!r}", field="temperature")
    return decoding


def completed_event(tokenizer, ids, truncated: bool, **extra: Any) -> dict[str, Any]:
    """The completed event for generated token ids: the reply parsed as training renders it (tool calls out of
    the text), its text, whether it was truncated, its token count, then `extra`."""
    message = parse_assistant(tokenizer.decode(ids, skip_special_tokens=True))
    return {"type": "completed", "message": message, "text": content_text(message.get("content")),
            "truncated": truncated, "tokens": len(ids), **extra}
