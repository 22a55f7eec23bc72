"""Where `improve run` grades when one process is not enough: N local processes (`--workers N`) or a Ray cluster
(`--engine ray [--address ADDR]`).

The parent cuts the input into chunks of whole lines (about `CHUNK_BYTES` each, `grading_pool.read_chunks`) and
sends each to a worker, which grades it with its own copy of the reward (loaded once per worker:
`grading.grade_chunk`) and returns the chunk's rows. The parent grades too (`Here`): it loads the reward once and,
whenever the oldest chunk out is not back yet, grades the next chunk itself instead of waiting. So `--workers N` is
the parent and N - 1 spawned workers (no extra process competes for the cores, and the parent's chunks are never
sent anywhere), and on Ray the driver grades beside the cluster. Results merge strictly in input order into the
same sinks one process writes, so the outputs are byte-identical to a one-process run's. At most `2 x` workers
chunks are out at a time, and at most `HERE_AHEAD_BYTES` of rows graded here wait behind them: memory holds a few
dozen MiB, never the log.

Faults fail closed. A local worker that dies breaks the pool: every chunk out on it and not yet merged is graded
again on a new pool, once (chunks graded here are kept); a second death fails the run (nothing merged twice,
nothing reported done: the outputs are only renamed into place when every chunk has merged). Ray retries a task
whose worker died (`RAY_RETRIES` times); past that the run fails. A chunk whose grading raised, here or in a worker,
fails the run with its error when its turn to merge comes: in input order.
"""
from __future__ import annotations

import io
import os
from collections import deque
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..core.errors import InputError, PluginError, StatesetError
from ..core.jsonio import open_maybe_gz
from .grading import ChunkFailure, ChunkResult, GradeTask, grade_chunk
from .grading_pool import Chunk, Pool, WorkerDied, grade_at, read_chunks

ENGINES = ("local", "ray")
#: Bytes of input a chunk holds (whole lines): big enough that sending it and its rows costs little beside
#: grading it, small enough that a few chunks per worker keep every core busy to the end.
CHUNK_BYTES = 1 << 20
LOCAL_RESTARTS = 1
RAY_RETRIES = 3
#: Bytes of rows, of chunks graded here, that may wait for older chunks still out: enough to keep the parent grading
#: while the workers start (a local one takes ~0.2 s, a Ray worker's first task ~0.9 s: dozens of a cheap reward's
#: chunks), bounded so that memory holds a few dozen MiB of rows, never the log's.
HERE_AHEAD_BYTES = 32 << 20


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def useful_workers(workers: int, paths: Iterable[str | os.PathLike], chunk_bytes: int) -> int:
    """`workers`, but no more than the inputs have chunks of `chunk_bytes`: a process with no chunk to take costs a
    start and its memory for nothing (a 3 MB log on a 64-core machine needs 3, not 64). A gzipped file's size says
    little of its chunks: then no cap."""
    chunks = 0
    for path in paths:
        if os.fspath(path).endswith(".gz"):
            return workers
        chunks += -(-os.path.getsize(path) // chunk_bytes)
    return max(1, min(workers, chunks))


class LocalPool:
    """N worker processes on this machine (spawned: nothing of the parent's threads or state is inherited; see
    `grading_pool` for why not a ProcessPoolExecutor)."""

    name = "local"

    def __init__(self, workers: int, fd: int | None):
        self.workers, self.restarts, self.fd = workers, LOCAL_RESTARTS, fd
        self.pool = Pool(workers, fd)

    def submit(self, task: GradeTask, chunk: Chunk):
        return self.pool.submit(task, chunk)

    def done(self, handle) -> bool:
        return self.pool.done(handle)

    def result(self, handle) -> ChunkResult | ChunkFailure:
        return self.pool.result(handle)

    def restart(self, task: GradeTask, cause: WorkerDied) -> None:
        if self.restarts <= 0:
            raise PluginError(f"reward:{task.reward}", "grade",
                              f"a grading worker process died again after the pool was restarted ({cause}); "
                              "no outputs were written")
        self.restarts -= 1
        self.pool.close()  # a dead worker breaks the pool: every chunk out on it is graded again, on a new one
        self.pool = Pool(self.workers, self.fd)

    def close(self) -> None:
        self.pool.close()


class RayCluster:
    """Ray tasks, one a chunk, on the cluster at `address` (default: a local one started here with `workers`
    CPUs, or the one this process already joined). Ray reruns a task whose worker died. A chunk travels with its
    bytes (the cluster's nodes may not see the input)."""

    name = "ray"

    def __init__(self, workers: int | None, address: str | None):
        try:
            import ray
        except ImportError:
            raise StatesetError("--engine ray needs Ray: pip install 'stateset-agents[ray]'") from None
        self.ray = ray
        self.started = not ray.is_initialized()
        if self.started:
            kwargs: dict[str, Any] = {"include_dashboard": False, "configure_logging": False}
            if address is None:
                kwargs["num_cpus"] = workers or default_workers()
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise StatesetError(f"cannot join the Ray cluster at {address or 'a new local cluster'}: {exc}") \
                    from None
        self.workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self.remote = ray.remote(num_cpus=1, max_retries=RAY_RETRIES)(grade_chunk)
        self._task: tuple[GradeTask, Any] | None = None

    def submit(self, task: GradeTask, chunk: Chunk):
        if self._task is None or self._task[0] is not task:
            self._task = (task, self.ray.put(task))  # sent to the object store once, not with every chunk
            self.who = f"reward:{task.reward}"
        return self.remote.remote(self._task[1], chunk.block, chunk.first_line)

    def done(self, handle) -> bool:
        return bool(self.ray.wait([handle], timeout=0, fetch_local=False)[0])

    def result(self, handle) -> ChunkResult | ChunkFailure:
        try:
            return self.ray.get(handle)
        except self.ray.exceptions.RayError as exc:
            # Retries are spent (a worker died RAY_RETRIES + 1 times), or the task failed outside our code.
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise PluginError(self.who, "grade", f"a grading task failed on the Ray cluster after {RAY_RETRIES} "
                                                 f"retries ({type(exc).__name__}: {first}); no outputs were written") \
                from None

    def restart(self, task: GradeTask, cause: WorkerDied) -> None:  # Ray retries by itself
        raise cause

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


class Here:
    """This process's share of the grading: chunks graded in place, with nothing pickled or sent. The reward is
    loaded on the first chunk (by then the pool's workers are spawning: the two overlap) and closed after the run;
    a reward that fails to load fails that chunk, as it would in a worker."""

    def __init__(self, fd: int | None):
        self.fd = fd
        self.grader: Any = None
        self.failure: ChunkFailure | None = None

    def grade(self, task: GradeTask, chunk: Chunk) -> ChunkResult | ChunkFailure:
        if self.grader is None and self.failure is None:
            from ..core.runtimes import load_component, load_spec

            try:
                self.grader = (load_component(task.reward, kind="reward", config=task.config, runtime=task.runtime)
                               if task.spec is None else load_spec(task.spec, config=task.config,
                                                                   runtime=task.runtime))
            except Exception as exc:  # noqa: BLE001 - failed in the chunk's turn, as a worker's load does
                self.failure = ChunkFailure.of(exc, f"reward:{task.reward}")
        return self.failure or grade_at(task, chunk, self.fd, self.grader)

    def close(self) -> None:
        if self.grader is not None:
            self.grader.close()


def open_engine(engine: str, workers: int | None, address: str | None, fd: int | None = None):
    if engine == "local":
        if address is not None:
            raise InputError("--address names a Ray cluster: use it with --engine ray", field="address")
        # This process grades too: N grading processes are it and N - 1 spawned workers.
        return LocalPool(max(1, (workers or default_workers()) - 1), fd)
    if engine == "ray":
        return RayCluster(workers, address)
    raise InputError(f"unknown grading engine {engine!r}; choose one of {', '.join(ENGINES)}", field="engine")


def graded_chunks(engine, task: GradeTask, chunks: Iterator[Chunk], digest: Future, window: int,
                  here: Here | None = None, ahead: int = HERE_AHEAD_BYTES) -> Iterator[ChunkResult]:
    """Each chunk's result, in input order, with at most `window` chunks out on `engine`. With `here`, whenever the
    oldest chunk is not back yet this process grades the next one itself, while less than `ahead` bytes of rows it
    graded wait to merge."""
    queue: deque[list] = deque()  # [chunk, engine handle (None: graded here), result (here only)], oldest first
    out = held = 0

    def current() -> GradeTask:
        nonlocal task
        if task.digest is None and digest.done():
            task = replace(task, digest=digest.result())
        return task

    def send() -> None:
        nonlocal out
        while out < window and (chunk := next(chunks, None)) is not None:
            queue.append([chunk, engine.submit(current(), chunk), None])
            out += 1

    send()
    while queue:
        entry = queue[0]
        chunk, handle = entry[0], entry[1]
        if handle is None:
            result = entry[2]
        elif here is not None and held < ahead and not engine.done(handle) and \
                (ahead_chunk := next(chunks, None)) is not None:
            # Rather than wait, grade the next chunk here; its rows wait their turn behind the chunks out.
            result = here.grade(current(), ahead_chunk)
            queue.append([ahead_chunk, None, result])
            held += _size(result)
            continue
        else:
            try:
                result = engine.result(handle)
            except WorkerDied as exc:
                engine.restart(task, exc)
                for waiting in queue:  # none of these merged: each out on the dead pool is graded again, once
                    if waiting[1] is not None:
                        waiting[1] = engine.submit(task, waiting[0])
                continue
        if isinstance(result, ChunkFailure) and result.kind == "digest":
            # A row names the input's sha256 (its conversation carries no source): wait for it, grade again.
            task = replace(task, digest=digest.result())
            if handle is None:
                entry[2] = here.grade(task, chunk)
                held += _size(entry[2])
            else:
                entry[1] = engine.submit(task, chunk)
            continue
        queue.popleft()
        if handle is None:
            held -= _size(result)
        else:
            out -= 1
        if isinstance(result, ChunkFailure):
            raise result.error()
        yield result
        send()


def _size(result: ChunkResult | ChunkFailure) -> int:
    """The bytes of rows a result holds."""
    if isinstance(result, ChunkFailure):
        return 0
    return len(result.graded[0]) + len(result.curated[0]) + sum(len(part[0]) for part in result.splits.values())


def grade_in_chunks(task: GradeTask, src: Path, digest: Future, merger, *, engine: str, workers: int | None,
                    address: str | None, chunk_bytes: int,
                    after_chunk: Callable[[], None] | None = None) -> None:
    """Grade `src` on `engine` (and here) and merge every chunk into `merger` (`grading.Merger`), in order."""
    with open_maybe_gz(src) as f:
        # Local workers and this process read their chunks from this open file (not from the path, which may be
        # replaced meanwhile); a gzipped input's offsets are not the file's, and Ray's nodes may not see it: their
        # chunks keep their bytes.
        fd = f.fileno() if isinstance(f, io.BufferedReader) else None
        runner = open_engine(engine, workers, address, fd)
        here = Here(fd)
        try:
            chunks = read_chunks(f, chunk_bytes, keep=fd is None or runner.name != "local")
            for result in graded_chunks(runner, task, chunks, digest, 2 * runner.workers, here):
                merger.add(result)
                if after_chunk:
                    after_chunk()
        finally:
            try:
                runner.close()
            finally:
                here.close()
