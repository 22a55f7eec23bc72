"""Where `improve run` grades when one process is not enough: N local processes (`--workers N`) or a Ray cluster
(`--engine ray [--address ADDR]`).

The parent reads the input in chunks of whole lines (about `CHUNK_BYTES` each) and sends each chunk's bytes to a
worker, which grades it with its own copy of the reward (loaded once per worker: `grading.grade_chunk`) and
returns the chunk's rows. The parent merges results strictly in input order into the same sinks one process
writes, so the outputs are byte-identical to a one-process run's. At most `2 x workers` chunks are out at a time:
memory holds a few chunks, never the log.

Faults fail closed. A local worker that dies breaks the pool: every chunk not yet merged is graded again on a new
pool, once; a second death fails the run (nothing merged twice, nothing reported done: the outputs are only
renamed into place when every chunk has merged). Ray retries a task whose worker died (`RAY_RETRIES` times); past
that the run fails. A chunk whose grading raised fails the run with the worker's error, in input order.
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterator

from ..core.errors import InputError, PluginError, StatesetError
from ..core.jsonio import open_maybe_gz
from .grading import ChunkFailure, ChunkResult, GradeTask, grade_chunk

ENGINES = ("local", "ray")
#: Bytes of input a chunk holds (whole lines): big enough that sending it and its rows costs little beside
#: grading it, small enough that a few chunks per worker keep every core busy to the end.
CHUNK_BYTES = 1 << 20
LOCAL_RESTARTS = 1
RAY_RETRIES = 3


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def read_chunks(path: Path, chunk_bytes: int) -> Iterator[tuple[bytes, int]]:
    """(bytes of whole lines, the number of the first line) for the input file, in order."""
    with open_maybe_gz(path) as f:
        line = 1
        while block := f.read(chunk_bytes):
            if not block.endswith(b"\n"):
                block += f.readline()
            yield block, line
            line += block.count(b"\n")


class WorkerDied(Exception):
    """A local worker process ended without answering."""


class LocalPool:
    """N worker processes on this machine (spawned: nothing of the parent's threads or state is inherited)."""

    name = "local"

    def __init__(self, workers: int):
        self.workers, self.restarts = workers, LOCAL_RESTARTS
        self.pool = self._pool()

    def _pool(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, task: GradeTask, chunk: tuple[bytes, int]) -> Future:
        from concurrent.futures.process import BrokenProcessPool

        try:
            return self.pool.submit(grade_chunk, task, *chunk)
        except BrokenProcessPool as exc:  # a worker died since the last result: this chunk is regraded too
            failed: Future = Future()
            failed.set_exception(exc)
            return failed

    def result(self, handle: Future) -> ChunkResult | ChunkFailure:
        from concurrent.futures.process import BrokenProcessPool

        try:
            return handle.result()
        except BrokenProcessPool as exc:
            raise WorkerDied(str(exc)) from None

    def restart(self, task: GradeTask, cause: WorkerDied) -> None:
        if self.restarts <= 0:
            raise PluginError(f"reward:{task.reward}", "grade",
                              f"a grading worker process died again after the pool was restarted ({cause}); "
                              "no outputs were written")
        self.restarts -= 1
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.pool = self._pool()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class RayCluster:
    """Ray tasks, one a chunk, on the cluster at `address` (default: a local one started here with `workers`
    CPUs, or the one this process already joined). Ray reruns a task whose worker died."""

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

    def submit(self, task: GradeTask, chunk: tuple[bytes, int]):
        if self._task is None or self._task[0] is not task:
            self._task = (task, self.ray.put(task))  # sent to the object store once, not with every chunk
            self.who = f"reward:{task.reward}"
        return self.remote.remote(self._task[1], *chunk)

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


def open_engine(engine: str, workers: int | None, address: str | None):
    if engine == "local":
        if address is not None:
            raise InputError("--address names a Ray cluster: use it with --engine ray", field="address")
        return LocalPool(workers or default_workers())
    if engine == "ray":
        return RayCluster(workers, address)
    raise InputError(f"unknown grading engine {engine!r}; choose one of {', '.join(ENGINES)}", field="engine")


def graded_chunks(engine, task: GradeTask, chunks: Iterator[tuple[bytes, int]], digest: Future,
                  window: int) -> Iterator[ChunkResult]:
    """Each chunk's result, in input order, with at most `window` chunks out at a time."""
    queue: deque[list] = deque()  # [chunk, handle], oldest first

    def fill() -> None:
        nonlocal task
        while len(queue) < window and (chunk := next(chunks, None)) is not None:
            if task.digest is None and digest.done():
                task = replace(task, digest=digest.result())
            queue.append([chunk, engine.submit(task, chunk)])

    fill()
    while queue:
        chunk, handle = queue[0]
        try:
            result = engine.result(handle)
        except WorkerDied as exc:
            engine.restart(task, exc)
            for entry in queue:  # none of these merged: each is graded again, once
                entry[1] = engine.submit(task, entry[0])
            continue
        if isinstance(result, ChunkFailure) and result.kind == "digest":
            # A row names the input's sha256 (its conversation carries no source): wait for it, grade again.
            task = replace(task, digest=digest.result())
            queue[0][1] = engine.submit(task, chunk)
            continue
        queue.popleft()
        if isinstance(result, ChunkFailure):
            raise result.error()
        yield result
        fill()


def grade_in_chunks(task: GradeTask, src: Path, digest: Future, merger, *, engine: str, workers: int | None,
                    address: str | None, chunk_bytes: int,
                    after_chunk: Callable[[], None] | None = None) -> None:
    """Grade `src` on `engine` and merge every chunk into `merger` (`grading.Merger`), in order."""
    runner = open_engine(engine, workers, address)
    try:
        for result in graded_chunks(runner, task, read_chunks(src, chunk_bytes), digest, 2 * runner.workers):
            merger.add(result)
            if after_chunk:
                after_chunk()
    finally:
        runner.close()
