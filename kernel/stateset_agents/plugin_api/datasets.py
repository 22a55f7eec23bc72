"""Reading the files between steps as every trainer and evaluator reads them: curated training rows, and the
evaluation prompts.

Training rows are curated prompt-completion rows (``prompt``, ``completion``, ``tools``, ``metadata``,
``lineage``); for multi-turn training a row may also carry ``continuation``: the recorded messages after the
completion (user turns, tool results, later assistant turns). A row of ``{"messages": [...]}`` is split at its first
assistant turn. A row whose ``split`` says validation or test (what `improve run` writes beside curated.jsonl) is
refused: the evaluation splits never train (`splits`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import orjson

from ..core.errors import InputError
from ..core.jsonio import read_jsonl, sha256_file
from .splits import LEGACY_HELD_OUT, refuse_evaluation_row


def decode_curated(row: Mapping[str, Any]) -> dict[str, Any]:
    """A curated row with its JSON-text columns (`tools`, `metadata`) parsed back; already-parsed values (rows
    written by other tools) pass through."""
    out = dict(row)
    for key in ("tools", "metadata"):
        if isinstance(out.get(key), (str, bytes)):
            out[key] = orjson.loads(out[key])
    return out


@dataclass
class Dataset:
    rows: list[dict[str, Any]]
    sha256: str | None = None
    path: str | None = None


def normalise_row(row: Any, where: str, line: int | None) -> dict[str, Any]:
    """One training row in the trainers' shape (prompt messages, one assistant completion, continuation, tools,
    metadata, id, and `_line` when read from a file); an InputError naming file, line and field otherwise."""
    if not isinstance(row, Mapping):
        raise InputError("a training row must be a JSON object", path=where, line=line)
    refuse_evaluation_row(row, where, line)  # validation and test rows never train
    try:  # curated.jsonl keeps `tools` and `metadata` as JSON text (one Arrow type per column)
        row = decode_curated(row)
    except ValueError as exc:
        raise InputError(f"'tools' or 'metadata' is not valid JSON text: {exc}", path=where, line=line) from None
    if "prompt" not in row and isinstance(row.get("messages"), list):
        msgs = row["messages"]
        first = next((i for i, m in enumerate(msgs) if isinstance(m, Mapping) and m.get("role") == "assistant"),
                     None)
        if first is None:
            raise InputError("conversation has no assistant turn", path=where, line=line, field="messages")
        row.update(prompt=msgs[:first], completion=msgs[first], continuation=msgs[first + 1:])
    prompt, completion = row.get("prompt"), row.get("completion")
    if not isinstance(prompt, list) or not all(isinstance(m, Mapping) and "role" in m for m in prompt):
        raise InputError("'prompt' must be a list of messages with a role", path=where, line=line, field="prompt")
    if isinstance(completion, list) and len(completion) == 1:
        completion = completion[0]
    if completion is None and os.path.basename(where) == LEGACY_HELD_OUT:
        raise InputError("this is a held-out evaluation file (held_out.jsonl: prompts, no completions); training "
                         "never reads evaluation rows: train on curated.jsonl", path=where, line=line)
    if not isinstance(completion, Mapping) or completion.get("role") != "assistant":
        raise InputError("'completion' must be one assistant message", path=where, line=line, field="completion")
    row["completion"] = dict(completion)
    row.setdefault("tools", [])
    row.setdefault("metadata", {})
    row.setdefault("continuation", [])
    row.setdefault("id", (row.get("lineage") or {}).get("conversation_id") or f"row{line or 0}")
    if line is not None:
        row["_line"] = line
    return row


def load_dataset(source: str | os.PathLike | Iterable[Mapping[str, Any]]) -> Dataset:
    """Training rows from a JSONL file (with its sha256 and path) or from an iterable of row dicts."""
    if isinstance(source, (str, os.PathLike)):
        path = str(source)
        rows = [normalise_row(obj, path, number) for number, obj in read_jsonl(path)]
        if not rows:
            raise InputError("the dataset has no rows", path=path)
        return Dataset(rows=rows, sha256=sha256_file(path), path=path)
    rows = [normalise_row(obj, "dataset", i + 1) for i, obj in enumerate(source)]
    if not rows:
        raise InputError("the dataset has no rows")
    return Dataset(rows=rows)


def load_eval_prompts(path: str | Path, *, with_split: bool = False):
    """`.txt`: one prompt a line (blank lines skipped). `.jsonl`: ``prompt`` (messages or a string) with optional
    ``metadata``, ``tools`` and ``split`` (the role `improve run` wrote: validation or test), or ``messages`` (a
    trailing assistant message, a reference answer, is dropped). With `with_split`, returns (cases, role): the one
    role every row records, or None when no row records one; rows of different roles are refused."""
    path = str(path)
    cases: list[dict[str, Any]] = []
    roles: set[str] = set()
    if path.endswith(".txt"):
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise InputError("file not found", path=path) from None
        for number, line in enumerate(lines, start=1):
            if line.strip():
                cases.append({"id": f"line{number}", "prompt": [{"role": "user", "content": line.strip()}],
                              "tools": [], "metadata": {}})
    elif path.endswith((".jsonl", ".jsonl.gz")):
        for number, obj in read_jsonl(path):
            if not isinstance(obj, Mapping):
                raise InputError("each line must be a JSON object", path=path, line=number)
            prompt = obj.get("prompt", obj.get("messages"))
            if isinstance(prompt, str):
                prompt = [{"role": "user", "content": prompt}]
            if not isinstance(prompt, list) or not prompt:
                raise InputError("needs 'prompt' (messages or text) or 'messages'", path=path, line=number,
                                 field="prompt")
            if "prompt" not in obj and prompt[-1].get("role") == "assistant":
                prompt = prompt[:-1]
            roles.add(str(obj["split"]) if obj.get("split") is not None else "")
            cases.append({"id": str(obj.get("id", f"line{number}")), "prompt": prompt,
                          "tools": obj.get("tools") or [], "metadata": obj.get("metadata") or {}})
    else:
        raise InputError("eval prompts must be a .txt (one prompt a line) or .jsonl file", path=path)
    if not cases:
        raise InputError("no evaluation prompts", path=path)
    if not with_split:
        return cases
    if len(roles) > 1:
        raise InputError(f"rows of different split roles in one file ({', '.join(sorted(r or 'none' for r in roles))})"
                         ": an evaluation file holds one role", path=path, field="split")
    role = next(iter(roles), "") or None
    return cases, role
