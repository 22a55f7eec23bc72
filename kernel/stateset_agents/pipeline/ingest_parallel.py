"""`ingest --workers N`: a log parsed on N local processes, with the one-process run's bytes.

Each input file is cut into chunks of whole lines (about `chunk_bytes` each: `grading_pool.read_chunks`) and each
chunk is parsed apart from the rest (`ingest_chunks.ingest_chunk`), on a spawned worker (`grading_pool.Pool`, its
answers in a data-only spool file: `ingest_wire`) or here: whenever the oldest chunk out is not back yet, this
process parses the next one itself instead of waiting, so N processes are this one and N - 1 workers, as
`improve run --workers N`. Chunks merge strictly in input order into the run's one state (`ingest._Ingest`):
duplicate removal, id uniqueness, writing, counts and progress are this process's, as in a one-process run.

Why the bytes are the same: a splittable ingestor yields for a chunk exactly what it yields for those lines in one
pass over the file, or says it cannot (`LinesNeedContext`, see `Ingestor`): the first-party ingestors say so for a
call log, whose conversation is stitched across lines. The file is then ingested from that chunk's first line to
its end here, in one pass: the chunks before it left the ingestor nothing to carry over, so that pass yields what
the one-process run yields for the rest. A gzipped file's chunks travel with their bytes (its offsets are not the
file's); its one-pass fallback reads it again from the start, skipping the lines already merged.

Faults fail closed: a worker that dies fails the run (no retry: a dead worker is most often a crashing ingestor),
and an error in a chunk fails it in input order; the outputs are renamed into place only after every chunk has
merged (`atomic_outputs`), so the previous ones stay.
"""
from __future__ import annotations

import io
from collections import deque
from typing import Any, Callable, Iterator

from ..core.components import Ingestor, Source
from ..core.errors import PluginError
from ..core.jsonio import iter_lines_from, open_maybe_gz
from .grading import ChunkFailure
from .grading_pool import Chunk, Pool, WorkerDied, read_chunks
from .ingest_state import InputSteps, _Ingest, _Tally
from .ingest_chunks import NEEDS_CONTEXT, IngestedChunk, IngestJob, IngestTask, PreparedReject, ingest_at
from .ingest_wire import read_ingested, write_ingested

#: Bytes of rows, of chunks parsed here, that may wait for older chunks still out: enough to keep this process
#: busy while the workers start, bounded so that memory holds a few dozen MiB of rows, never the log's.
HERE_AHEAD_BYTES = 32 << 20
#: Chunks out on each worker at a time: enough that a worker still has one queued while this process parses a chunk
#: of its own between merges.
WINDOW_PER_WORKER = 4

_Item = tuple[int, "Chunk | None", "IngestedChunk | ChunkFailure | None"]  # file, chunk (None: its end), result


def start_pool(workers: int) -> Pool:
    """The `workers` - 1 spawned processes of a run on `workers` (this one parses too). The caller closes it."""
    return Pool(max(1, workers - 1), None, work=ingest_at, write=write_ingested, read=read_ingested, label="ingest")


def ingest_on_workers(ingestor: Ingestor, job: IngestJob, sources: list[Source], run: _Ingest, steps: InputSteps,
                      pool: Pool, *, chunk_bytes: int, ahead: int = HERE_AHEAD_BYTES) -> None:
    """Ingest `sources` into `run` on this process and `pool`'s (`start_pool`), file after file, as `run_ingest`'s
    one-process loop does (`steps` keeps each file's tally and progress)."""
    tasks = [IngestTask(job, s.path, s.sha256, s.local_path) for s in sources]
    in_one_pass: set[int] = set()  # files whose rest was ingested here in one pass: their later chunks are dropped
    chunks = _file_chunks(sources, chunk_bytes, in_one_pass)
    lines_wanted = steps.progress is not None

    def here(task: IngestTask, chunk: Chunk) -> IngestedChunk | ChunkFailure:
        return ingest_at(task, chunk, None, ingestor)

    try:
        for index, chunk, result in _in_order(pool, tasks, chunks, here, ahead):
            if index != steps.current:  # every file has an entry (its end, at least), in order
                steps.start(index)
            source = sources[index]
            if chunk is None:
                steps.finish(run)
            elif index in in_one_pass:
                continue
            elif isinstance(result, ChunkFailure):
                if result.kind != NEEDS_CONTEXT:
                    raise result.error()
                in_one_pass.add(index)
                rest = iter_lines_from(source.local_path, chunk.offset, chunk.first_line)
                run.items(ingestor.ingest_lines(source, rest), source, steps.tally, job.who, steps.report,
                          lines_wanted)
            else:
                _merge(run, result, source.path, steps.tally)
                steps.report(result.last_line)
    except WorkerDied as exc:
        raise PluginError(job.who, "ingest", f"an {exc}; the run failed and no outputs were written") from None


def _merge(run: _Ingest, chunk: IngestedChunk, path: str, tally: _Tally) -> None:
    rows = memoryview(chunk.rows)
    at = 0
    for item in chunk.items:
        end = at + item.row_size
        if isinstance(item, PreparedReject):
            run.prepared_reject(item.reason, tally, rows[at:end])
        else:
            run.prepared(item, path, tally, rows[at:end])
        at = end


def _file_chunks(sources: list[Source], chunk_bytes: int,
                 in_one_pass: set[int]) -> Iterator[tuple[int, Chunk | None]]:
    """(file index, chunk) for every chunk of every file in order, then (file index, None) at the file's end. A
    file in `in_one_pass` is read no further."""
    for index, source in enumerate(sources):
        with open_maybe_gz(source.local_path) as f:
            keep = not isinstance(f, io.BufferedReader)  # a gzipped file's offsets are not the file's
            for chunk in read_chunks(f, chunk_bytes, keep=keep):
                if index in in_one_pass:
                    break
                yield index, chunk
        yield index, None


def _size(result: Any) -> int:
    return len(result.rows) if isinstance(result, IngestedChunk) else 0


def _in_order(pool: Pool, tasks: list[IngestTask], chunks: Iterator[tuple[int, Chunk | None]],
              here: Callable[[IngestTask, Chunk], IngestedChunk | ChunkFailure], ahead: int) -> Iterator[_Item]:
    """Each chunk's result (and each file's end), in input order, with at most `WINDOW_PER_WORKER` chunks a worker
    out on `pool`. Whenever the oldest chunk is not back yet, this process parses the next one itself (`here`), while less than
    `ahead` bytes of rows it parsed wait to merge. The first chunks always go to the workers."""
    queue: deque[list] = deque()  # [file, chunk, pool handle (None: parsed here, or a file's end), result]
    window, out, held = WINDOW_PER_WORKER * pool.size, 0, 0

    def send() -> None:
        nonlocal out
        while out < window and (entry := next(chunks, None)) is not None:
            index, chunk = entry
            handle = None if chunk is None else pool.submit(tasks[index], chunk)
            queue.append([index, chunk, handle, None])
            out += handle is not None

    send()
    while queue:
        index, chunk, handle, result = queue[0]
        if handle is not None:
            if held < ahead and not pool.done(handle) and (entry := next(chunks, None)) is not None:
                # Rather than wait, parse the next chunk here; its rows wait their turn behind the chunks out.
                ahead_index, ahead_chunk = entry
                ahead_result = None if ahead_chunk is None else here(tasks[ahead_index], ahead_chunk)
                queue.append([ahead_index, ahead_chunk, None, ahead_result])
                held += _size(ahead_result)
                continue
            result = pool.result(handle)
            out -= 1
        else:
            held -= _size(result)
        queue.popleft()
        yield index, chunk, result
        send()
