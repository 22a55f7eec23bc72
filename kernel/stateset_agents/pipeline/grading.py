"""The grading core of `improve run`, shared by every way it grades: in this process, on a pool of local processes
(`--workers N`), or on a Ray cluster (`--engine ray`; the drivers are in `grading_engines.py`).

`Curation` turns transcript lines into batches for the reward and each batch's grades into output rows: grade rows,
curated rows, validation and test prompts, counts and the score tally. One process runs it over the whole input
into the output files; a worker runs it over one chunk of lines (`grade_chunk`) into memory, and the parent merges
the chunks' parts in input order. The rows of a conversation depend on that conversation alone and every count
and the tally merge exactly, so any split of the input gives the same bytes.
"""
from __future__ import annotations

import hashlib
import io
import math
import os
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..core.components import GradeItem
from ..core.errors import InputError, PluginError, StatesetError
from ..core.jsonio import dumps_line
from ..plugin_api.splits import TEST, VALIDATION
from .curated_rows import Conversation, CuratedSink, group_key, role_of

QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
#: The counts of the summary, in its order.
COUNT_KEYS = ("conversations", "turns_graded", "applicable", "not_applicable", "at_or_above_threshold", "curated",
              "curated_conversations", "validation_conversations", "validation_prompts", "test_conversations",
              "test_prompts", "held_out_conversations", "held_out_prompts", "held_out_turns_withheld")
# What is counted; the rest follows from these.
_RAW_COUNTS = ("conversations", "turns_graded", "applicable", "curated", "curated_conversations",
               "validation_conversations", "validation_prompts", "test_conversations", "test_prompts",
               "held_out_conversations", "held_out_prompts", "held_out_turns_withheld")


# ------------------------------------------------------------------------------------------------ checks


def check_conversation(obj: Any, shown: str, line: int) -> tuple[dict[str, Any], list[int], bool]:
    """The conversation, its id made a string; the indices of its assistant turns (found in the same pass); and
    whether it is unchanged (its id was a string already)."""
    def bad(message: str, field: str | None) -> None:
        raise InputError(message, path=shown, line=line, field=field)

    if not isinstance(obj, dict):
        bad("expected a JSON object (one conversation a line)", None)
    cid = obj.get("id")
    if isinstance(cid, bool) or not isinstance(cid, (str, int)) or cid == "":
        bad("missing or invalid conversation id", "id")
    as_read = isinstance(cid, str)
    obj["id"] = str(cid)
    messages = obj.get("messages")
    if not isinstance(messages, list) or not messages:
        bad("expected a non-empty list of messages", "messages")
    turns = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if not isinstance(role, str):
            bad("expected a message object with a string role", f"messages[{i}].role")
        if role == "assistant":
            turns.append(i)
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            bad("expected a list of tool calls or null", f"messages[{i}].tool_calls")
    for key, kind, what in (("tools", list, "a list"), ("metadata", dict, "an object"), ("source", dict, "an object")):
        if obj.get(key) is not None and not isinstance(obj[key], kind):
            bad(f"expected {what} or null", key)
    declared = (obj.get("metadata") or {}).get("split")
    if declared in (VALIDATION, TEST):
        # A log that says it is held out (an industry bundle's validation/ or test/, ingested) must never become
        # training rows; honouring it per conversation could still put its group on both sides, so refuse it.
        bad(f"conversation {obj['id']!r} declares split {declared!r}: held-out conversations never become training "
            "rows; run `improve run` on the train logs only (the bundle's validation and test prompt files are "
            "used as they are)", "metadata.split")
    return obj, turns, as_read


def role_and_group(data: Mapping[str, Any], fraction: float) -> tuple[str, str]:
    """The conversation's split role, and its group as the split rows record it."""
    kind, key = group_key(data)
    role = role_of(key, fraction)
    if role == "train":
        return role, ""  # curated rows do not record the group: their lineage names the conversation
    return role, key.decode() if kind != "opening" else f"opening:{hashlib.sha256(key).hexdigest()[:16]}"


def check_grade(row: Any, cid: str, turn: int, who: str) -> tuple[float, bool]:
    """The reward must answer the turn asked, in order, with a score in [0, 1]: anything else is its fault."""
    try:  # the common case, cheaply: it runs for every turn
        score, applicable = row["score"], row["applicable"]
        if (row["conversation_id"] == cid and row["turn_index"] == turn and type(score) is float
                and 0.0 <= score <= 1.0 and type(applicable) is bool and "breakdown" in row):
            return score, applicable
    except (TypeError, KeyError):
        pass
    if not isinstance(row, dict) or row.get("conversation_id") != cid or row.get("turn_index") != turn:
        got = (row.get("conversation_id"), row.get("turn_index")) if isinstance(row, dict) else type(row).__name__
        raise PluginError(who, "grade", f"expected the grade of conversation {cid!r} turn {turn}, got {got!r}")
    score, applicable = row.get("score"), row.get("applicable")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= score <= 1.0:
        raise PluginError(who, "grade", f"score {score!r} for conversation {cid!r} turn {turn} is not in [0, 1]")
    if not isinstance(applicable, bool):
        raise PluginError(who, "grade", f"'applicable' for conversation {cid!r} turn {turn} is not a boolean")
    row.setdefault("breakdown", {})
    return float(score), applicable


# ------------------------------------------------------------------------------------------------ the tally


def _exact_parts(values: list[float]) -> list[float]:
    """Floats whose exact sum is the exact sum of `values` (math.fsum's rounding, repeated on the remainder): a
    few numbers that merge with any other chunk's without a rounding error."""
    rest, parts = list(values), []
    try:
        while (s := math.fsum(rest)) != 0.0:
            parts.append(s)
            rest.append(-s)
    except OverflowError:  # values near the float limit: summed plainly (the order of chunks may show then)
        return [sum(values)]
    return parts


class Tally:
    """Score distribution and per-check means over applicable turns, in constant memory: scores are counted by
    value rounded to 4 decimals, so the quantiles are exact to 1e-4 whatever the input size. The per-check sums
    are exact (folded into `_exact_parts` every few thousand values), so one process and any number of workers
    report the same means to the last bit."""

    FOLD = 4096

    def __init__(self):
        self.values: Counter[float] = Counter()
        self.checks: dict[str, list[float]] = {}  # values not yet folded
        self.folded: dict[str, list] = {}  # key -> [exact parts, how many values]

    def add(self, score: float, breakdown: Any) -> None:
        self.values[round(score, 4)] += 1
        if isinstance(breakdown, dict):
            checks = self.checks
            for key, value in breakdown.items():
                kind = type(value)
                # an exact float first (most checks are), then any other number; lists, strings and None are not
                if kind is float or (kind is not str and isinstance(value, (int, float))):
                    if math.isfinite(value):
                        acc = checks.get(key)
                        if acc is None:
                            acc = checks[key] = []
                        acc.append(value if kind is float else float(value))

    def fold(self, at_least: int = FOLD) -> None:
        """Fold the buffered values of every check holding at least `at_least` of them (called once a batch)."""
        for key, acc in self.checks.items():
            if len(acc) >= at_least and acc:
                parts, n = self.folded.setdefault(key, [[], 0])
                self.folded[key] = [_exact_parts(parts + acc), n + len(acc)]
                acc.clear()

    def merge(self, other: "Tally") -> None:
        self.values.update(other.values)
        other.fold(1)
        for key, (parts, n) in other.folded.items():
            mine, m = self.folded.get(key, ([], 0))
            self.folded[key] = [_exact_parts(mine + parts), m + n]

    def summary(self) -> dict[str, Any]:
        self.fold(1)
        n = sum(self.values.values())
        counts = [0] * 10
        for value, c in self.values.items():
            counts[min(int(value * 10), 9)] += c
        ordered = sorted(self.values.items())
        quantiles: dict[str, float | None] = {}
        for q in QUANTILES:
            rank, seen, found = max(1, math.ceil(q * n)), 0, None  # nearest rank
            for value, c in ordered:
                seen += c
                if seen >= rank:
                    found = value
                    break
            quantiles[f"p{round(q * 100)}"] = found
        return {
            "over": "applicable turns", "n": n,
            "mean": sum(v * c for v, c in ordered) / n if n else None,
            "quantiles": quantiles,
            "histogram": {"edges": [i / 10 for i in range(11)], "counts": counts},
            "checks": {k: {"mean": math.fsum(parts) / c, "n": c} for k, (parts, c) in sorted(self.folded.items())},
        }


# ------------------------------------------------------------------------------------------------ curation


class Curation:
    """Batches of conversations for the reward, and each batch's grades into the sinks (`add(lines, rows)`,
    `add_line(line, bits)` for the curated one), with the counts and the tally."""

    def __init__(self, who: str, *, threshold: float, fraction: float, batch_size: int, send_raw: bool,
                 source: tuple[str, Any], graded, split_sinks: Mapping[str, Any], curated):
        self.who, self.threshold, self.fraction, self.batch_size, self.send_raw = (who, threshold, fraction,
                                                                                  batch_size, send_raw)
        self.source, self.graded, self.split_sinks, self.curated = source, graded, split_sinks, curated
        self.c = dict.fromkeys(_RAW_COUNTS, 0)
        self.tally = Tally()
        self.in_flight: deque[list[Conversation]] = deque()

    def run(self, grader, lines: Iterable[tuple[int, bytes, Any]], shown: str,
            after_batch: Callable[[], None] | None = None) -> None:
        # An out-of-process reward pipelines batches (its grading overlaps our parsing and writing) through
        # grade_many.
        try:
            for rows in grader.grade_many(self.batches(lines, shown), screened=True):
                self.take(rows)
                if after_batch:
                    after_batch()
        except (StatesetError, OSError, NeedDigest):
            raise  # the input's fault, the plugin's (already named), the disk's, or a chunk's request for the digest
        except Exception as exc:  # noqa: BLE001 - an in-process reward raised, or its rows cannot be written
            raise PluginError(self.who, "grade", f"{type(exc).__name__}: {exc}") from exc

    def batches(self, lines: Iterable[tuple[int, bytes, Any]], shown: str) -> Iterator[list[GradeItem]]:
        c, fraction, send_raw, batch_size = self.c, self.fraction, self.send_raw, self.batch_size
        batch: list[Conversation] = []
        items: list[GradeItem] = []
        for line, raw, obj in lines:
            data, turns, as_read = check_conversation(obj, shown, line)
            c["conversations"] += 1
            role, group = role_and_group(data, fraction)
            conv = Conversation(data, line, turns, role, group)
            if conv.held_out:
                c["held_out_conversations"] += 1
                c[f"{role}_conversations"] += 1
            if turns:  # nothing to ask the reward about a conversation without assistant turns
                batch.append(conv)
                # An out-of-process reward is sent the line as read, not a re-serialisation, where it still says
                # what the checked conversation says.
                items.append(GradeItem(data, raw_json=raw if send_raw and as_read else None, assistant_turns=turns))
            if len(batch) >= batch_size:
                self.in_flight.append(batch)
                yield items
                batch, items = [], []
        if batch:
            self.in_flight.append(batch)
            yield items

    def take(self, rows: list[dict[str, Any]]) -> None:
        """The grades of the oldest batch in flight: checked, tallied, written to the sinks."""
        who, threshold, source, c = self.who, self.threshold, self.source, self.c
        batch = self.in_flight.popleft()
        # Conversations the reward screened out (out of process) have rows in the JSONL only, every one not
        # applicable: nothing of theirs is curated, held out or tallied.
        screened = getattr(rows, "screened", ())
        expected = sum(len(conv.turns) for i, conv in enumerate(batch) if i not in screened)
        if len(rows) != expected:
            raise PluginError(who, "grade", f"returned {len(rows)} grades for {expected} assistant turns")
        # A bad row below fails the run: nothing is kept. Rows that came as JSONL (an out-of-process reward's) are
        # written as they came: the same bytes as encoding them here.
        total = len(rows) + getattr(rows, "screened_rows", 0)
        self.graded.add(getattr(rows, "jsonl", None) or b"".join(map(dumps_line, rows)), total)
        c["turns_graded"] += total
        add_score, split_sinks, curated = self.tally.add, self.split_sinks, self.curated
        # Per-turn counts in locals: this loop runs for every assistant turn of the input.
        applicable_n = curated_n = withheld_n = curated_convs = 0
        prompts = {VALIDATION: 0, TEST: 0}
        rows_iter = iter(rows)
        for i, conv in enumerate(batch):
            if screened and i in screened:
                continue
            prompt_written = had_curated = False
            cid = conv.data["id"]
            for turn in conv.turns:
                row = next(rows_iter)
                score, applicable = check_grade(row, cid, turn, who)
                if not applicable:
                    continue
                applicable_n += 1
                add_score(score, row["breakdown"])
                if conv.held_out:
                    # The prompt must hold the first user message (the split key) to be safe from collisions.
                    if not prompt_written and any(m.get("role") == "user" for m in conv.data["messages"][:turn]):
                        split_sinks[conv.role].add(conv.held_out_line(turn, source))
                        prompts[conv.role] += 1
                        prompt_written = True
                    if score >= threshold:
                        withheld_n += 1
                    continue
                if score >= threshold:
                    curated.add_line(*conv.curated_line(turn, score, source))
                    curated_n += 1
                    had_curated = True
            curated_convs += had_curated
        c["applicable"] += applicable_n
        c["curated"] += curated_n
        c["curated_conversations"] += curated_convs
        c["held_out_turns_withheld"] += withheld_n
        c["validation_prompts"] += prompts[VALIDATION]
        c["test_prompts"] += prompts[TEST]
        c["held_out_prompts"] += prompts[VALIDATION] + prompts[TEST]
        self.tally.fold()
        for sink in (self.graded, curated, *split_sinks.values()):
            sink.flush()


def final_counts(raw: Mapping[str, int]) -> dict[str, int]:
    """The summary's counts, in its order, from the counted ones."""
    derived = {"not_applicable": raw["turns_graded"] - raw["applicable"],
               "at_or_above_threshold": raw["curated"] + raw["held_out_turns_withheld"]}
    return {key: derived[key] if key in derived else raw[key] for key in COUNT_KEYS}


# ------------------------------------------------------------------------------------------------ one chunk


@dataclass(frozen=True)
class GradeTask:
    """What a worker needs to grade chunks, as plain data (it travels to processes and Ray nodes)."""

    reward: str
    config: Mapping[str, Any]
    runtime: str
    threshold: float
    fraction: float
    batch_size: int
    source_path: str  # the input's absolute path, as lineage names it
    shown: str  # the input as errors name it
    #: STATESET_AGENTS_PLUGIN_MODULES of the parent, so workers find the same test-only or local plugins.
    plugin_modules: str | None = None
    #: The input's sha256 when the parent knows it: rows of conversations without `source.sha256` name it.
    digest: str | None = None
    #: The reward's registration as the parent resolved it (`registry.ComponentSpec`): a worker loads it directly,
    #: without discovering every installed plugin first (about half of a worker's start-up).
    spec: Any = None


class NeedDigest(Exception):
    """A row needs the input's sha256 and the task does not carry it: the parent resends the chunk with it."""


class _Digest:
    """Stands in for the parent's digest future (`Conversation` calls `.result()`)."""

    def __init__(self, value: str | None):
        self.value = value

    def result(self) -> str:
        if self.value is None:
            raise NeedDigest()
        return self.value


class _Collect:
    """A sink in memory: one chunk's lines of one output."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.rows = 0
        self.size = 0
        #: curated only: (row, offset, length, bits) of each row that fills a nullable field no earlier row of the
        #: chunk filled; the parent decides, as `CuratedSink.add_line` does, whether such a row moves to the head.
        self.marks: list[tuple[int, int, int, int]] = []
        self.seen = 0

    def add(self, lines: bytes, rows: int = 1) -> None:
        self.parts.append(lines)
        self.rows += rows
        self.size += len(lines)

    def add_line(self, line: bytes, bits: int) -> None:
        if bits & ~self.seen:
            self.marks.append((self.rows, self.size, len(line), bits))
            self.seen |= bits
        self.add(line)

    def flush(self) -> None:
        pass

    def part(self) -> tuple[bytes, int]:
        return b"".join(self.parts), self.rows


@dataclass
class ChunkResult:
    identity: dict[str, str]
    counts: dict[str, int]
    tally: Tally
    graded: tuple[bytes, int]
    curated: tuple[bytes, int]
    curated_marks: list[tuple[int, int, int, int]]
    splits: dict[str, tuple[bytes, int]]


@dataclass
class ChunkFailure:
    """A worker's error, as data: the kernel's errors do not all survive pickling."""

    kind: str
    args: tuple
    exit_code: int = 1

    @classmethod
    def of(cls, exc: BaseException, who: str, call: str = "grade",
           worker: str = "a grading worker") -> "ChunkFailure":
        if isinstance(exc, InputError):
            return cls("input", (exc.detail, exc.path, exc.line, exc.field), exc.exit_code)
        if isinstance(exc, PluginError):
            return cls("plugin", (exc.component, exc.call, exc.message), exc.exit_code)
        if isinstance(exc, StatesetError):
            return cls("stateset", (str(exc),), exc.exit_code)
        return cls("plugin", (who, call, f"{type(exc).__name__}: {exc} (in {worker})"))

    def error(self) -> StatesetError:
        if self.kind == "input":
            detail, path, line, field_ = self.args
            return InputError(detail, path=path, line=line, field=field_)
        if self.kind == "plugin":
            return PluginError(*self.args)
        exc = StatesetError(*self.args)
        exc.exit_code = self.exit_code
        return exc


_LOADED: dict[tuple, Any] = {}


def _grader_for(task: GradeTask):
    """This process's reward for `task`, loaded on its first chunk and kept: each worker loads it once."""
    from ..core.jsonio import dumps

    key = (task.reward, dumps(task.config), task.runtime, task.plugin_modules, getattr(task.spec, "target", None))
    grader = _LOADED.get(key)
    if grader is None:
        from ..core.registry import PLUGIN_MODULES_ENV, get_registry
        from ..core.runtimes import load_component, load_spec

        if task.plugin_modules is not None and os.environ.get(PLUGIN_MODULES_ENV) != task.plugin_modules:
            os.environ[PLUGIN_MODULES_ENV] = task.plugin_modules
            get_registry(refresh=True)
        for old in _LOADED.values():  # another run's reward: one at a time per worker
            old.close()
        _LOADED.clear()
        grader = _LOADED[key] = (
            load_component(task.reward, kind="reward", config=task.config, runtime=task.runtime)
            if task.spec is None else load_spec(task.spec, config=task.config, runtime=task.runtime))
        _close_at_exit(grader)
    return grader


def _close_at_exit(grader) -> None:
    # A pool worker ends through os._exit (atexit never runs), after multiprocessing's finalizers; a Ray worker
    # through sys.exit. An out-of-process reward's server is shut down either way.
    import atexit
    from multiprocessing import util

    util.Finalize(grader, grader.close, exitpriority=10)
    atexit.register(grader.close)


def grade_chunk(task: GradeTask, block: bytes, first_line: int, grader=None) -> ChunkResult | ChunkFailure:
    """Grade the conversations in `block` (whole lines of the input, the first of them line `first_line`), with
    `grader` (the parent's own reward, when it grades a chunk) or this process's copy of the task's reward."""
    from ..core.jsonio import rare_gc

    who = f"reward:{task.reward}"
    try:
        if grader is None:
            grader = _grader_for(task)
        identity = grader.identity()
        who = f"reward:{identity['name']}"
        graded, curated = _Collect(), _Collect()
        splits = {VALIDATION: _Collect(), TEST: _Collect()}
        curation = Curation(who, threshold=task.threshold, fraction=task.fraction, batch_size=task.batch_size,
                            send_raw=task.runtime != "inprocess", source=(task.source_path, _Digest(task.digest)),
                            graded=graded, split_sinks=splits, curated=curated)
        with rare_gc():
            curation.run(grader, _block_lines(block, first_line, task.shown), task.shown)
        curation.tally.fold(1)
        return ChunkResult(identity, curation.c, curation.tally, graded.part(), curated.part(), curated.marks,
                           {role: sink.part() for role, sink in splits.items()})
    except NeedDigest:
        return ChunkFailure("digest", ())
    except Exception as exc:  # noqa: BLE001 - carried to the parent, which fails the run with it
        return ChunkFailure.of(exc, who)


def _block_lines(block: bytes, first_line: int, shown: str) -> Iterator[tuple[int, bytes, Any]]:
    """(line number, line as read, parsed object) for the lines of `block`, as `read_jsonl_lines` reads a file."""
    import orjson

    from ..core.jsonio import _json_error

    for number, raw in enumerate(io.BytesIO(block), start=first_line):
        if raw.isspace():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            error = _json_error(raw.rstrip(b"\r\n"))
            raise InputError(f"invalid JSON: {error}", path=shown, line=number) from None
        yield number, raw, obj


# ------------------------------------------------------------------------------------------------ merging


class Merger:
    """Chunk results into the output sinks, in input order: the same rows, counts and tally as one process."""

    def __init__(self, graded, split_sinks: Mapping[str, Any], curated: CuratedSink):
        self.graded, self.split_sinks, self.curated = graded, split_sinks, curated
        self.c = dict.fromkeys(_RAW_COUNTS, 0)
        self.tally = Tally()
        self.identity: dict[str, str] | None = None

    def add(self, result: ChunkResult) -> None:
        if self.identity is None:
            self.identity = result.identity
        elif result.identity != self.identity:
            # Workers on several machines may have different versions installed: their grades cannot be mixed.
            raise PluginError(f"reward:{self.identity['name']}", "grade",
                              f"workers disagree on the reward: {self.identity} and {result.identity} (install "
                              "the same version of the plugin on every node)")
        for key, n in result.counts.items():
            self.c[key] += n
        self.tally.merge(result.tally)
        self.graded.add(*result.graded)
        for role, part in result.splits.items():
            self.split_sinks[role].add(*part)
        self._add_curated(*result.curated, result.curated_marks)
        for sink in (self.graded, self.curated, *self.split_sinks.values()):
            sink.flush()

    def _add_curated(self, blob: bytes, rows: int, marks: list[tuple[int, int, int, int]]) -> None:
        # Rows between marks fill nothing new (an earlier mark of the chunk filled their fields), so they never
        # move: they go in whole; each marked row goes through add_line, which decides as in one process.
        sink, pos, row = self.curated, 0, 0
        if not any(bits & ~sink.seen for *_, bits in marks):
            # The usual case once the head is settled: no row fills a field new to the file, so none can move and
            # the chunk's rows go in as they came (no copy of them, which for long rows costs more than the rest).
            if blob:
                self._plain(blob, rows)
            return
        view = memoryview(blob)
        for at_row, at, size, bits in marks:
            if at > pos:
                self._plain(bytes(view[pos:at]), at_row - row)
            sink.add_line(bytes(view[at:at + size]), bits)
            pos, row = at + size, at_row + 1
        if pos < len(blob):
            self._plain(bytes(view[pos:]), rows - row)

    def _plain(self, lines: bytes, rows: int) -> None:
        self.curated.add(lines, rows)
        self.curated.pending_bytes += len(lines)  # as add_line counts them: the head's size decides moves
