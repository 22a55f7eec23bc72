"""What the fuzz tests share: seed corpora (the real logs and the samples), hypothesis strategies that generate and
mutate inputs, one `ingest` of a file through the CLI's entry point, and the accounting every ingest must satisfy.

Shared data is read in place (tests/helpers/realdata.py), never copied into the project.
"""
from __future__ import annotations

import functools
import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from stateset_agents.pipeline.ingest import run_ingest
from tests.helpers.realdata import tau_log_records
from tests.ingest.logs import anthropic_calls, openai_calls, to_anthropic

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "kernel" / "stateset_agents" / "samples"
#: Every reason a reject may give (docs/ingest.md, plus `too_deep`).
REASONS = frozenset(("invalid_json", "unknown_format", "wrong_type", "missing_field", "no_messages", "unknown_role",
                     "orphan_tool_result", "error_response", "stitch_conflict", "duplicate_id", "too_deep"))
#: The product's own errors for a line (what a `LineError` may say).
LINE_REASONS = REASONS - {"invalid_json", "stitch_conflict", "duplicate_id", "too_deep"}


# ------------------------------------------------------------------------------------------------ seed corpora


@functools.lru_cache(maxsize=None)
def _tau() -> tuple[str, ...]:
    return tuple(json.dumps(r) for r in tau_log_records(with_expected_calls=True))


@functools.lru_cache(maxsize=None)
def _samples() -> tuple[str, ...]:
    return tuple(line for line in (SAMPLES / "support_logs.jsonl").read_text().splitlines() if line.strip())


def tau_records() -> list[dict]:
    """The 100 tau-airline conversations as OpenAI message logs (fresh copies: tests mutate them)."""
    return [json.loads(r) for r in _tau()]


def sample_records() -> list[dict]:
    """The sample support logs, one conversation a line."""
    return [json.loads(r) for r in _samples()]


def short(record: dict, turns: int = 8) -> dict:
    """A real conversation cut after its first `turns` messages (ending on an assistant turn, tool results kept
    with their calls), without its tool schemas: a small seed that keeps the real message shapes."""
    messages = record["messages"][:turns]
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()
    return {"id": record["id"], "messages": messages or record["messages"][:2], "metadata": record.get("metadata", {})}


def seeds() -> list[dict]:
    """Small real conversations: every sample log and the tau-airline logs cut short."""
    return [*sample_records(), *(short(r) for r in tau_records())]


@functools.lru_cache(maxsize=None)
def _seed_lines() -> tuple[str, ...]:
    return tuple(json.dumps(r) for r in seeds())


def seed(i: int) -> dict:
    """Seed `i` (any integer, taken modulo the corpus), a fresh copy."""
    lines = _seed_lines()
    return json.loads(lines[i % len(lines)])


seed_records = st.integers(min_value=0, max_value=10_000).map(seed)


def call_log_lines(record: dict, fmt: str, keyed: bool) -> list[str]:
    """One call log line per assistant turn of a real conversation, in `fmt` (with its id as conversation_id when
    `keyed`)."""
    keys = {"conversation_id": record["id"]} if keyed else {}
    make = openai_calls if fmt == "openai" else anthropic_calls
    return [json.dumps(c) for c in make(record["messages"], record.get("tools"), **keys)]


def conversation_line(record: dict, fmt: str) -> str:
    if fmt == "openai":
        return json.dumps(record)
    system, messages = to_anthropic(record["messages"])
    line = {"id": record["id"], "messages": messages, "metadata": record.get("metadata", {})}
    if system is not None:
        line["system"] = system
    return json.dumps(line)


# ------------------------------------------------------------------------------------------------- strategies

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 63, 2 ** 63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=12)
#: Keys and values the formats look at, so generated values hit the checks, not only "unknown format".
KEYS = ("role", "content", "tool_calls", "tool_call_id", "name", "function", "arguments", "id", "type", "text",
        "messages", "tools", "metadata", "request", "response", "choices", "message", "error", "system",
        "tool_use_id", "input", "input_schema", "conversation_id", "session_id", "is_error")
ROLES = ("system", "developer", "user", "assistant", "tool", "robot", "", "USER")
BLOCK_TYPES = ("text", "tool_use", "tool_result", "image", "thinking", "custom")
hot_values = st.one_of(st.sampled_from(ROLES), st.sampled_from(BLOCK_TYPES), json_values)


def deep(value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = [value]
    return value


@st.composite
def mutated(draw, value: Any, depth: int = 0) -> Any:
    """`value` with one change somewhere inside it: a key dropped or added, a value replaced by another type, a
    role or block type swapped, a list emptied or an item repeated, a value nested past the JSON writers' limit."""
    if isinstance(value, (dict, list)) and value and depth < 10 and draw(st.integers(0, 3)) > 0:
        if isinstance(value, dict):
            key = draw(st.sampled_from(sorted(value)))
            return {**value, key: draw(mutated(value[key], depth + 1))}
        i = draw(st.integers(0, len(value) - 1))
        return [*value[:i], draw(mutated(value[i], depth + 1)), *value[i + 1:]]
    op = draw(st.sampled_from(("replace", "hot", "drop", "add", "empty", "repeat", "wrap", "stringify", "deep")))
    if op == "replace":
        return draw(json_values)
    if op == "hot":
        return draw(hot_values)
    if op == "drop" and isinstance(value, dict) and value:
        key = draw(st.sampled_from(sorted(value)))
        return {k: v for k, v in value.items() if k != key}
    if op == "add" and isinstance(value, dict):
        return {**value, draw(st.sampled_from(KEYS)): draw(hot_values)}
    if op == "empty":
        return type(value)() if isinstance(value, (dict, list, str)) else None
    if op == "repeat" and isinstance(value, list) and value:
        return [*value, value[-1]]
    if op == "wrap":
        return [value]
    if op == "stringify":
        return json.dumps(value)
    if op == "deep":
        return deep(value, draw(st.sampled_from((200, 253, 260, 1000))))
    return draw(json_values)


@st.composite
def mutated_line(draw, line: str | bytes) -> bytes:
    """A real line changed: structurally (parsed, mutated, re-serialised) or as bytes (cut, a byte inserted or
    flipped, invalid UTF-8), never gaining a newline."""
    data = line.encode() if isinstance(line, str) else line
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = None
    if parsed is not None and draw(st.integers(0, 3)) > 0:
        return json.dumps(draw(mutated(parsed))).encode()
    at = draw(st.integers(0, len(data)))
    op = draw(st.sampled_from(("cut", "insert", "flip")))
    if op == "cut":
        return data[:at]
    byte = draw(st.integers(0, 255).filter(lambda b: b != 10))
    if op == "insert":
        return data[:at] + bytes([byte]) + data[at:]
    return data[:at] + bytes([byte]) + data[at + 1:] if at < len(data) else data + bytes([byte])


# -------------------------------------------------------------------------------------------- ingest, checked


@dataclass
class Ingested:
    lines: list[bytes]  # the file's lines as written
    transcripts: list[dict]
    rejects: list[dict]
    summary: dict
    outputs: dict[str, bytes]  # file name -> bytes

    def where(self, conv: dict) -> list[int]:
        return conv["source"].get("lines") or [conv["source"]["line"]]


def ingest(fmt: str, lines: list[bytes | str], *, redact: bool = False, config: dict | None = None,
           name: str = "log.jsonl", workdir: Path | None = None) -> Ingested:
    """`run_ingest` (what `stateset-agents ingest` runs) on a file of `lines`, in `workdir` (its outputs replaced)
    or a fresh directory."""
    raw = [line.encode() if isinstance(line, str) else line for line in lines]
    with tempfile.TemporaryDirectory(prefix="fuzz-ingest-") as fresh:
        tmp = workdir or fresh
        log = Path(tmp) / name
        log.write_bytes(b"".join(line + b"\n" for line in raw))
        summary = run_ingest(fmt, log, Path(tmp) / "out", redact=redact, config=config)
        outputs = {p.name: p.read_bytes() for p in (Path(tmp) / "out").iterdir()}
    for key in ("transcripts", "rejects"):  # the summary's digests are of the files as written
        assert summary["outputs"][key]["sha256"] == hashlib.sha256(outputs[f"{key}.jsonl"]).hexdigest()
    # The summary names the input by the path given; make it the same whatever the temporary directory was.
    outputs = {k: v.replace(str(log).encode(), name.encode()) for k, v in outputs.items()}
    transcripts = [json.loads(r) for r in outputs["transcripts.jsonl"].splitlines()]
    rejects = [json.loads(r) for r in outputs["rejects.jsonl"].splitlines()]
    return Ingested(raw, transcripts, rejects, json.loads(outputs["ingest_summary.json"]), outputs)


def blank(line: bytes) -> bool:
    return (line + b"\n").isspace()


def check_accounting(run: Ingested) -> set[int]:
    """Every non-blank line written (part of a transcript), rejected (with its file, line, reason and detail) or a
    duplicate, exactly once; the counts and digests of the summary agree with the files. Returns the lines that
    are neither written nor rejected: the duplicates."""
    lines = {n for n, line in enumerate(run.lines, 1) if not blank(line)}
    summary = run.summary
    assert summary["read"] == len(lines)
    written = [n for conv in run.transcripts for n in run.where(conv)]
    rejected = [r["line"] for r in run.rejects]
    assert len(written) == len(set(written)), "a line in two transcripts"
    assert len(rejected) == len(set(rejected)), "a line rejected twice"
    assert not set(written) & set(rejected), "a line both written and rejected"
    assert set(written) | set(rejected) <= lines, "an output names a line that is blank or not in the input"
    for r in run.rejects:
        assert r["path"].endswith("log.jsonl") and r["reason"] in REASONS, r
        assert isinstance(r["detail"], str) and r["detail"], r
        assert r["field"] is None or (isinstance(r["field"], str) and r["field"]), r
    for conv in run.transcripts:
        assert conv["source"]["path"].endswith("log.jsonl") and conv["messages"], conv["source"]
    assert len({c["id"] for c in run.transcripts}) == len(run.transcripts), "ids are not unique"
    assert (summary["written"], summary["rejected"]) == (len(run.transcripts), len(run.rejects))
    assert sum(summary["rejected_by_reason"].values()) == len(run.rejects)
    assert summary["conversations"] >= summary["written"] + summary["duplicates"]
    duplicates = lines - set(written) - set(rejected)
    assert bool(duplicates) == bool(summary["duplicates"]), (duplicates, summary["duplicates"])
    assert len(duplicates) >= summary["duplicates"]
    return duplicates


def content(conv: dict) -> tuple[str, str, str]:
    """What makes two conversations duplicates: messages, tools and metadata."""
    return tuple(json.dumps(conv.get(k) or ([] if k != "metadata" else {}), sort_keys=True)
                 for k in ("messages", "tools", "metadata"))


def without_lines(conv: dict) -> dict:
    """A transcript without where its lines were and the file's digest (which change as lines are added)."""
    return {**conv, "source": {k: v for k, v in conv["source"].items() if k not in ("line", "lines", "sha256")}}
