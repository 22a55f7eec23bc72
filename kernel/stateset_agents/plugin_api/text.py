"""The visible text of a message: one rule for improve's curated rows, the rewards, the training text (the chat
template's input), the overlap check and evaluation, so what is graded is what is trained on.

`content_text(content)`:

* None is "";
* a string is itself;
* a list of content parts (OpenAI ``{"type": "text", "text": ...}``, Anthropic text blocks) is the text of its text
  parts joined with a newline: a part is text when it is a string or a mapping whose ``text`` is a string; other
  parts (images, audio) add nothing. A newline, not "", because parts are separate pieces of text: vLLM's OpenAI
  server joins text parts with a newline too, and curated.jsonl has always stored them that way;
* anything else (a tool result logged as an object or a number) is its compact JSON text, which a reward can parse
  back (``{"ok": true}``, not Python's ``{'ok': True}``).
"""
from __future__ import annotations

from collections.abc import Mapping  # not typing's: its isinstance checks are slower
from typing import Any

from ..core.jsonio import dumps


def content_text(content: Any) -> str:
    """A message's ``content`` as text (the rule above)."""
    if content.__class__ is str:  # the common case first: rewards call this for every message they read
        return content
    if content is None:
        return ""
    if isinstance(content, str):
        return str(content)
    if isinstance(content, (list, tuple)):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif (type(part) is dict or isinstance(part, Mapping)) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    try:
        return dumps(content).decode()
    except TypeError:  # not JSON-serialisable (a custom object): its own text
        return str(content)


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message's ``content`` (`content_text`)."""
    content = message.get("content")
    return content if content.__class__ is str else content_text(content)
