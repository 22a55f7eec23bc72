"""Builders for improve tests: transcripts written the way ingest writes them."""
from __future__ import annotations

from pathlib import Path

import orjson


def write_transcripts(directory: Path, conversations: list[dict], source: str = "logs/chat.jsonl") -> Path:
    """DIR/transcripts.jsonl as ingest writes it: each conversation with a `source`."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "transcripts.jsonl"
    with open(path, "wb") as f:
        for line, conv in enumerate(conversations, start=1):
            row = {"id": conv["id"], "source": {"path": source, "sha256": "ab" * 32, "line": line},
                   "messages": conv["messages"], "tools": conv.get("tools", []), "metadata": conv.get("metadata", {})}
            f.write(orjson.dumps(row) + b"\n")
    return path


def chat(cid: str, *turns: str, metadata: dict | None = None) -> dict:
    """A conversation of alternating user and assistant texts after a system message."""
    messages = [{"role": "system", "content": "Be helpful."}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return {"id": cid, "messages": messages, "metadata": metadata or {}}
