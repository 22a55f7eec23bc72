"""A chunk of a log parsed apart from the rest, for `ingest --workers N` (`ingest_parallel` drives it): in a worker
process, or in the parent between merges.

The ingestor parses the chunk's lines on their own (`Ingestor.ingest_lines(..., part=True)`), and each conversation
gets the kernel's work that needs nothing but the conversation (`ingest.prepare_conversation`: its content and id
digests, its transcript line, redaction); each reject its line. What needs the whole run (duplicates, id
uniqueness, writing, counts) is the parent's, in input order (`ingest._Ingest.prepared`). A chunk whose lines
need the rest of their file (a call log, stitched across lines) comes back as the failure `needs_context`.
"""
from __future__ import annotations

from collections.abc import Mapping  # typing's alias makes every isinstance check several times slower
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..core.components import LinesNeedContext, Reject, Source
from ..core.errors import PluginError
from ..core.jsonio import dumps_line, iter_block_lines, rare_gc
from .grading import ChunkFailure
from .grading_pool import Chunk, InputChanged
from .ingest_state import Prepared, prepare_conversation

#: The failure a chunk comes back with when its lines cannot be ingested apart from the rest of the file.
NEEDS_CONTEXT = "needs_context"


@dataclass(frozen=True)
class IngestJob:
    """What every chunk of a run shares: the ingestor to load, and what the kernel does to each conversation."""

    format: str
    config: dict[str, Any]
    redact: bool
    who: str  # the ingestor's full name, for errors


@dataclass(frozen=True)
class IngestTask:
    """A chunk's file: the job, and the input file the chunk is part of."""

    job: IngestJob
    path: str  # as the user gave it (written into every row)
    sha256: str
    local_path: str  # where this machine reads it

    def source(self) -> Source:
        return Source(path=self.path, sha256=self.sha256, local_path=self.local_path)


class PreparedReject(NamedTuple):
    """A reject the ingestor yielded: its reason, and the size of its line in the chunk's rows."""

    reason: str
    row_size: int


class IngestedChunk(NamedTuple):
    """A chunk's items in order (`Prepared` conversations, `PreparedReject`s), their lines in the same order in
    `rows` (a conversation too deep to write has none), and the number of the chunk's last line (for progress)."""

    items: list[Prepared | PreparedReject]
    rows: bytes
    last_line: int


_LOADED: dict[tuple, Any] = {}


def _ingestor_for(job: IngestJob):
    """This process's ingestor for `job`, loaded on its first chunk and kept: each worker loads it once."""
    from ..core.jsonio import dumps
    from ..core.runtimes import load_component

    key = (job.format, dumps(job.config))
    ingestor = _LOADED.get(key)
    if ingestor is None:
        for old in _LOADED.values():  # another run's: one at a time per worker
            old.close()
        _LOADED.clear()
        _keep_freed_heap()
        ingestor = _LOADED[key] = load_component(job.format, kind="ingestor", config=job.config, runtime="inprocess")
        from multiprocessing import util

        # A pool worker ends through os._exit (atexit never runs), after multiprocessing's finalizers.
        util.Finalize(ingestor, ingestor.close, exitpriority=10)
    return ingestor


def _keep_freed_heap() -> None:
    """In a worker (a process of ours): let glibc's malloc keep freed memory instead of handing it back at once.
    Each chunk allocates and frees a few MiB (its bytes, its rows); by default they come from fresh pages every
    time (mmap, or a heap trimmed at each free), and the page faults cost ~15% of a worker's time."""
    try:
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, 64 << 20)
    mallopt(m_top_pad, 16 << 20)


def ingest_chunk(task: IngestTask, block: bytes, first_line: int, ingestor=None) -> IngestedChunk | ChunkFailure:
    """Ingest `block` (whole lines of the task's file, the first of them line `first_line`) apart from the rest,
    with `ingestor` (the parent's own) or this process's copy of the job's ingestor."""
    job = task.job
    try:
        if ingestor is None:
            ingestor = _ingestor_for(job)
        source = task.source()
        items: list[Prepared | PreparedReject] = []
        rows: list[bytes] = []
        with rare_gc():
            for item in ingestor.ingest_lines(source, iter_block_lines(block, first_line), part=True):
                if isinstance(item, dict) or isinstance(item, Mapping):
                    prepared, row = prepare_conversation(item, source, job.who, job.redact)
                    items.append(prepared)
                elif isinstance(item, Reject):
                    row = dumps_line(item.as_dict())
                    items.append(PreparedReject(item.reason, len(row)))
                else:
                    raise PluginError(job.who, "ingest",
                                      f"yielded a {type(item).__name__}, not a conversation or Reject")
                rows.append(row)
        last_line = first_line + block.count(b"\n", 0, max(0, len(block) - 1))
        return IngestedChunk(items, b"".join(rows), last_line)
    except LinesNeedContext:
        return ChunkFailure(NEEDS_CONTEXT, ())
    except Exception as exc:  # noqa: BLE001 - carried to the parent, which fails the run with it in its turn
        return ChunkFailure.of(exc, job.who, "ingest", "an ingest worker")


def ingest_at(task: IngestTask, chunk: Chunk, fd: int | None = None, ingestor=None) -> IngestedChunk | ChunkFailure:
    """Read `chunk` (its bytes where it keeps them: a gzipped input's; else from the file, at its offset) and
    ingest it. A worker opens the file by its path, as a one-process run reads it."""
    try:
        if chunk.block is not None:
            block = chunk.block
        else:
            with open(task.local_path, "rb") as f:
                block = chunk.read(f.fileno())
    except InputChanged as exc:
        return ChunkFailure("input", (str(exc).replace("graded", "ingested"), task.path, chunk.first_line, None))
    except OSError as exc:
        return ChunkFailure("input", (f"cannot read the input ({exc})", task.path, chunk.first_line, None))
    return ingest_chunk(task, block, chunk.first_line, ingestor)
