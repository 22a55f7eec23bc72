"""`ingest`: conversation logs -> `DIR/transcripts.jsonl`, `DIR/rejects.jsonl`, `DIR/ingest_summary.json`.

The ingestor plugin parses its log format; this step does everything format-independent: finding the input files
(a file, or a directory's `.jsonl` / `.jsonl.gz` files in name order), their sha256, dropping exact duplicates,
making ids unique, redaction, writing, and the summary.

Streaming: conversations are written as they come, to temp files renamed into place at the end (a killed run
leaves the old outputs or the new ones). What grows with the input is only the set of conversation digests and
ids seen, for duplicate removal (`ingest_state.DigestSet`); the plugin's own state must be bounded too. The run's
state and the per-conversation work are `ingest_state`'s, shared with `ingest --workers N` (`ingest_parallel`).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from ..core.components import Source
from ..core.errors import InputError
from ..core.jsonio import atomic_outputs, sha256_file
from ..core.runtimes import load_component
from .ingest_state import (  # noqa: F401 - the names importers of this module use
    CHUNK_BYTES,
    REDACTION_LABELS,
    REJECTS,
    SUMMARY,
    TRANSCRIPTS,
    DigestSet,
    InputSteps,
    Prepared,
    ProgressFn,
    _Ingest,
    _Output,
    _Tally,
    input_files,
    prepare_conversation,
)


def run_ingest(format: str, inputs: str | os.PathLike, output: str | os.PathLike, *, redact: bool = False,
               runtime: str = "inprocess", progress: ProgressFn | None = None,
               config: Mapping[str, Any] | None = None, workers: int | None = 1,
               chunk_bytes: int = CHUNK_BYTES) -> dict[str, Any]:
    """Ingest `inputs` (a file, or a directory of .jsonl/.jsonl.gz files) with `ingestor:{format}` into the
    directory `output`. Returns the summary, also written to `output/ingest_summary.json`. Raises InputError when
    the inputs cannot be found; bad lines never raise, they are rejected.

    `workers` > 1 (None: one per core) parses on that many local processes, this one included, in chunks of about
    `chunk_bytes` of input, with outputs byte-identical to one process's (`ingest_parallel`); where the ingestor
    cannot ingest a file in parts (it is not `splittable`, or runs out of process) everything runs here."""
    if workers is None:
        from .grading_engines import default_workers

        workers = default_workers()
    if workers < 1:
        raise InputError("--workers must be at least 1", field="workers")
    if chunk_bytes < 1:
        raise InputError("chunk size must be at least 1 byte", field="chunk_bytes")
    files = input_files(inputs)
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise InputError("the output must be a directory", path=os.fspath(output))
    if os.path.isdir(inputs) and out.exists() and out.resolve() == Path(inputs).resolve():
        raise InputError("the output directory must not be the input directory: its outputs would be read as "
                         "input on the next run", path=os.fspath(output))
    # A log of one chunk is ingested here: starting workers would cost more than they save. Workers start before
    # the inputs are hashed, so that their start overlaps it; they go unused if the ingestor cannot split a file.
    pool = None
    if workers > 1 and runtime == "inprocess":
        from .grading_engines import useful_workers

        workers = useful_workers(workers, files, chunk_bytes)  # no more processes than the inputs have chunks
        if workers > 1 and sum(os.path.getsize(f) for f in files) > chunk_bytes:
            from .ingest_parallel import start_pool

            pool = start_pool(workers)
    with contextlib.ExitStack() as stack:
        if pool is not None:
            stack.callback(pool.close)
        sources = [Source(path=f, sha256=sha256_file(f), local_path=os.path.abspath(f)) for f in files]
        return _ingest(format, sources, out, redact, runtime, progress, config, pool, chunk_bytes)


def _ingest(format: str, sources: list[Source], out: Path, redact: bool, runtime: str, progress: ProgressFn | None,
            config: Mapping[str, Any] | None, pool: Any, chunk_bytes: int) -> dict[str, Any]:
    # One set: nothing is renamed until every file is flushed (a full disk replaces none), the summary last.
    with load_component(format, kind="ingestor", config=config, runtime=runtime) as ingestor, \
            atomic_outputs() as outputs:
        summary_file = outputs.open(out / SUMMARY)
        run = _Ingest(_Output(outputs.open(out / TRANSCRIPTS), TRANSCRIPTS),
                      _Output(outputs.open(out / REJECTS), REJECTS), redact)
        who = getattr(ingestor, "full_name", f"ingestor:{format}")
        steps = InputSteps(sources, progress)
        if pool is not None and getattr(ingestor, "splittable", False) is True:
            from .ingest_parallel import IngestJob, ingest_on_workers

            job = IngestJob(format=format, config=dict(config or {}), redact=redact, who=who)
            ingest_on_workers(ingestor, job, sources, run, steps, pool, chunk_bytes=chunk_bytes)
        else:
            for index, source in enumerate(sources):
                tally, report = steps.start(index)
                run.items(ingestor.ingest(source), source, tally, who, report, progress is not None)
                steps.finish(run)
        component = {"name": who, "version": getattr(ingestor, "version", None), "config": dict(config or {})}
        summary = _summary(format, component, redact, steps.per_file, run)
        summary_file.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    return summary


def _summary(format: str, component: dict[str, Any], redact: bool, per_file: list[dict[str, Any]],
             run: "_Ingest") -> dict[str, Any]:
    return {
        "format": format,
        "ingestor": component,
        "redact": redact,
        "inputs": per_file,
        **run.totals.as_dict(),
        "rejected_by_reason": dict(sorted(run.reasons.items())),
        "call_logs": {k: run.call_logs[k] for k in ("calls", "conversations", "unstitched")},
        "redactions": {label: run.redactions[label] for label in REDACTION_LABELS} if redact else None,
        "outputs": {"transcripts": run.transcripts.describe(), "rejects": run.rejects.describe()},
    }
