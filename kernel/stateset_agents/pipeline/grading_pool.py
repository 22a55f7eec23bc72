"""The local worker processes of `improve run --workers N` (`grading_engines.LocalPool` drives them).

Why not `concurrent.futures.ProcessPoolExecutor`: its pipes are fed and drained by threads of the parent, and the
parent grades chunks too (`grading_engines.Here`). A thread that needs the GIL back after each 64 KiB pipe write or
read waits up to the switch interval (5 ms) while the parent's main thread grades, so a 1 MiB chunk out and its
rows (up to ~3 MiB) back took tens of milliseconds: the worker sat idle. Here the parent's main thread does all the
talking, between its own chunks, and no large message goes through a pipe: a worker reads its chunk from the
input itself (`os.pread` on the parent's open file, handed over at spawn: the very file the parent reads, even if
the path is replaced meanwhile; a gzipped input's chunks are spooled), and writes its result to a file in a
private spool folder (on tmpfs where there is one), read back in one call; the pipe carries offsets and names.
The parent reads the input once to cut it into chunks and count their lines, into one reused buffer
(`read_chunks`), and keeps no chunk's bytes.

A worker grades the chunks it is sent one after another, in order, with its own copy of the reward
(`grading.grade_chunk`, loaded once per process). The pool is not tied to grading: `Pool(work=, write=, read=)`
runs any chunk function whose results have a data-only codec (`ingest --workers` parses logs on it:
`ingest_parallel`).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections import deque
from typing import IO, Any, Callable, Iterator, NamedTuple

from .grading import ChunkFailure, ChunkResult, GradeTask, grade_chunk
from .grading_wire import read_result, write_result


class Chunk(NamedTuple):
    """Whole lines of the input: where they start in the file and how many bytes they take, the number of the
    first, and their bytes where they are kept (a gzipped input's, whose offsets are not the file's; Ray's). A chunk
    of a plain file is read again, at its offset, by whoever grades it: the parent keeps no chunk in memory."""

    offset: int
    size: int
    first_line: int
    block: bytes | None = None

    def read(self, fd: int | None) -> bytes:
        if self.block is not None:
            return self.block
        parts, got = [], 0
        while got < self.size and (part := os.pread(fd, self.size - got, self.offset + got)):
            parts.append(part)
            got += len(part)
        if got != self.size:  # the file was cut short under us: the lines the parent counted are gone
            raise InputChanged(f"the input changed while it was graded: {self.size} bytes were expected at offset "
                               f"{self.offset}, {got} were read")
        return parts[0] if len(parts) == 1 else b"".join(parts)


class InputChanged(Exception):
    """The input is shorter than when the parent read it."""


def grade_at(task: GradeTask, chunk: Chunk, fd: int | None, grader=None) -> ChunkResult | ChunkFailure:
    """Read `chunk` from the input and grade it (`grading.grade_chunk`); an input cut short fails the chunk."""
    try:
        block = chunk.read(fd)
    except InputChanged as exc:
        return ChunkFailure("input", (str(exc), task.shown, chunk.first_line, None))
    return grade_chunk(task, block, chunk.first_line, grader)


def read_chunks(f: IO[bytes], chunk_bytes: int, keep: bool) -> Iterator[Chunk]:
    """The chunks of the open input `f`, in order: at most `chunk_bytes` each, cut after the last newline (or one
    line, when a line is longer), with their bytes where `keep`. One buffer is read into and reused: the lines
    are counted in place, and nothing is copied for a chunk that is not kept."""
    buf = bytearray(max(1, chunk_bytes))
    view = memoryview(buf)
    filled, line, offset, eof = 0, 1, 0, False
    while True:
        while filled < len(buf) and not eof:
            got = f.readinto(view[filled:])
            eof = not got
            filled += got or 0
        if not filled:
            return
        end = buf.rfind(b"\n", 0, filled) + 1
        if not end:
            if not eof:  # a line longer than the buffer: make room for it
                view.release()
                buf.extend(bytes(len(buf)))
                view = memoryview(buf)
                continue
            end = filled  # the last line, without a newline
        yield Chunk(offset, end, line, bytes(view[:end]) if keep else None)
        line += buf.count(b"\n", 0, end)
        offset += end
        rest = filled - end
        buf[:rest] = bytes(view[end:filled])  # the start of the next chunk's first line (a copy: they may overlap)
        filled = rest


class WorkerDied(Exception):
    """A local worker process ended without answering."""


def _spool_root() -> str | None:
    """tmpfs where there is one: the spool's files are then memory, never disk."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class InputFd:
    """The input's open file descriptor, as a spawned worker's argument: multiprocessing duplicates it into the
    child when the process starts."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing.reduction import DupFd

        return _detach, (DupFd(self.fd),)


def _detach(dup) -> int:
    return dup.detach()


#: (task, chunk, the input's fd) -> a result `write` can write: what a worker does with each chunk.
WorkFn = Callable[[Any, Chunk, "int | None"], Any]


def serve(conn, spool: str, fd: int | None, work: WorkFn = grade_at, write=write_result) -> None:
    """A worker's loop: (task or None for the last one, the chunk, its name) in; the name out, once its result is
    in the spool."""
    task: Any = None
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the parent is gone
            return
        if message is None:
            return
        new_task, chunk, name, spooled = message
        task = new_task or task
        path = os.path.join(spool, name)
        if spooled:
            with open(path + ".in", "rb") as f:
                chunk = chunk._replace(block=f.read())
            os.unlink(path + ".in")
        result = work(task, chunk, fd)
        with open(path + ".tmp", "wb") as f:
            write(f, result)
        os.rename(path + ".tmp", path)  # the parent never reads half a result
        conn.send(name)


class _Worker:
    def __init__(self, ctx, spool: str, fd: int | None, work: WorkFn, write, label: str):
        self.conn, child = ctx.Pipe()
        args = (child, spool, None if fd is None else InputFd(fd), work, write)
        self.process = ctx.Process(target=serve, args=args, daemon=True, name=f"stateset-{label}-worker")
        self.process.start()
        child.close()
        self.task: Any = None  # the last task sent: a chunk of the same task goes without it
        self.pending: deque[str] = deque()  # chunks sent, not answered, in order
        self.answered: set[str] = set()
        self.dead = False

    def drain(self, block: bool) -> None:
        """Take the answers that have come (with `block`, wait for one, or for the process's end)."""
        from multiprocessing.connection import wait

        while not self.dead and self.pending:
            if not self.conn.poll(0):
                if not block:
                    return
                wait([self.conn, self.process.sentinel])
                if not self.conn.poll(0):  # ended without a word
                    self.dead = True
                    return
            try:
                name = self.conn.recv()
            except (EOFError, OSError):
                self.dead = True
                return
            self.pending.popleft()  # answers come in the order the chunks were sent
            self.answered.add(name)
            block = False

    def stop(self) -> None:
        """An idle worker is asked to end (its reward is closed: an out-of-process one's server too); one still
        grading chunks that are no longer wanted (the run failed, or the pool broke) is terminated."""
        if self.pending or self.dead:
            self.process.terminate()
        else:
            try:
                self.conn.send(None)
            except OSError:
                self.process.terminate()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class Pool:
    """`size` spawned worker processes; `submit` returns a handle, `done` and `result` read its answer. `fd`: the
    input's open file, where chunks are read at their offsets (None: each chunk's bytes are spooled, or `work`
    reads them itself). A worker runs `work` on each chunk and `write`s its result to the spool; `read` reads it
    back: by default they grade (`grade_at`, `grading_wire`); `label` names the processes and the spool."""

    def __init__(self, size: int, fd: int | None, *, work: WorkFn = grade_at, write=write_result,
                 read=read_result, label: str = "grading"):
        import multiprocessing

        self.size, self.label, self.read = size, label, read
        self.ctx = multiprocessing.get_context("spawn")  # nothing of the parent's threads or state is inherited
        self.spool = tempfile.mkdtemp(prefix=f"stateset-{label}-", dir=_spool_root())
        self.workers: list[_Worker] = []
        self.sent = 0
        try:
            for _ in range(size):
                self.workers.append(_Worker(self.ctx, self.spool, fd, work, write, label))
        except BaseException:
            self.close()
            raise

    def submit(self, task: Any, chunk: Chunk) -> tuple[_Worker, str]:
        worker = min(self.workers, key=lambda w: len(w.pending))  # the least loaded: chunks cost unevenly
        self.sent += 1
        name = f"chunk-{self.sent}"
        spooled = chunk.block is not None
        if spooled:  # a gzipped input's: its bytes go through the spool, the pipe would block on them
            with open(os.path.join(self.spool, name + ".in"), "wb") as f:
                f.write(chunk.block)
            chunk = chunk._replace(block=None)
        if not worker.dead:
            try:
                worker.conn.send((task if task is not worker.task else None, chunk, name, spooled))
                worker.task = task
                worker.pending.append(name)
            except OSError:  # died since: result() says so
                worker.dead = True
        return worker, name

    def done(self, handle: tuple[_Worker, str]) -> bool:
        worker, name = handle
        worker.drain(block=False)
        return name in worker.answered or worker.dead

    def result(self, handle: tuple[_Worker, str]) -> Any:
        worker, name = handle
        while name not in worker.answered:
            if worker.dead:
                worker.process.join(1)
                raise WorkerDied(f"{self.label} worker {worker.process.pid} ended (exit code "
                                 f"{worker.process.exitcode}) without answering")
            worker.drain(block=True)
        worker.answered.discard(name)
        path = os.path.join(self.spool, name)
        with open(path, "rb") as f:
            result = self.read(f)
        os.unlink(path)
        return result

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        shutil.rmtree(self.spool, ignore_errors=True)
