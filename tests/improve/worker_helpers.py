"""Builders for the worker and Ray tests: a log of every kind of conversation the rows tell apart, and the outputs
compared across runs."""
from __future__ import annotations

import json
import os
from pathlib import Path

import orjson

from tests.improve.improve_helpers import chat, write_transcripts

OUTPUTS = ("graded.jsonl", "curated.jsonl", "validation.jsonl", "test.jsonl", "next_steps.md",
           "improve_summary.json")
CHUNK = 1500  # bytes: a few conversations a chunk, so a small log spans many chunks


def varied_log(directory: Path, n: int = 90) -> Path:
    """Conversations of every kind the rows distinguish: curated and not, held-out groups (task ids and
    openings), tool-call turns, not-applicable turns, conversations without assistant turns or without a
    `source` (their rows name the input's sha256), integer ids."""
    convs = []
    for i in range(n):
        words = ("GOOD", "EDGE", "OKAY", "BAD", "")[i % 5]
        c = chat(f"c{i}", f"question {i} about order {i % 7}", f"{words} answer {i}", "thanks", f"EDGE {i} more")
        if i % 3 == 0:
            c["metadata"] = {"task_id": f"task-{i % 11}"}
        if i % 13 == 0:
            c["messages"].append({"role": "assistant", "content": None, "tool_calls": [
                {"id": f"t{i}", "type": "function", "function": {"name": "lookup", "arguments": {"n": i}}}]})
        if i % 17 == 0:
            c["messages"] = c["messages"][:2]  # no assistant turn
        convs.append(c)
    path = write_transcripts(directory, convs)
    lines = path.read_bytes().splitlines(keepends=True)
    for k in (5, 40, 77):  # as a hand-written file has them: no source, an integer id
        row = orjson.loads(lines[k])
        row.pop("source")
        row["id"] = 1000 + k
        lines[k] = orjson.dumps(row) + b"\n"
    lines.insert(20, b"\n")  # a blank line: line numbers still count it
    path.write_bytes(b"".join(lines))
    return directory


def outputs(out: Path) -> dict[str, bytes]:
    # The output folder's own path appears in the summary and next steps: the rest must match byte for byte.
    return {name: (out / name).read_bytes().replace(str(out.resolve()).encode(), b"OUT") for name in OUTPUTS}


def policy_file(path: Path, **policy) -> Path:
    path.write_text(json.dumps(policy))
    return path


def with_fault_reward(monkeypatch):
    """For a fixture: `improve_fault` (worker_fault_reward.py) registered beside the toy rewards, here and in
    every worker."""
    from stateset_agents.core.registry import PLUGIN_MODULES_ENV, get_registry

    monkeypatch.setenv(PLUGIN_MODULES_ENV, os.environ[PLUGIN_MODULES_ENV] + ",tests.improve.worker_fault_reward")
    get_registry(refresh=True)
    yield
    monkeypatch.undo()
    get_registry(refresh=True)
