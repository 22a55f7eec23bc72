"""What every adapter renders from the rows: keys, prompt messages as chat templates take them, ground truth."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from stateset_agents.plugin_api.text import content_text


def row_key(index: int) -> str:
    return f"r{index}"


def keyed_rows(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The scorer's view of the rendered rows: key -> the row (prompt messages, tools, metadata, id)."""
    return {row_key(i): {"prompt": list(r["prompt"]), "tools": r.get("tools") or [],
                         "metadata": r.get("metadata") or {}, "id": r.get("id")} for i, r in enumerate(rows)}


def chat_prompt(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """role + visible text: what an engine's chat template is given (tool calls and results stay with the
    scorer, which grades in the full conversation)."""
    return [{"role": str(m["role"]), "content": content_text(m.get("content"))} for m in messages]


def ground_truth(row: Mapping[str, Any]) -> str:
    meta = row.get("metadata") or {}
    value = meta.get("reference_answer", meta.get("answer", ""))
    return "" if value is None else str(value)
