"""JSON and file helpers shared by every step: streaming JSONL, atomic writes, digests.

Outputs are written to a temporary file in the same directory and renamed into place, so a killed run leaves
either the old file or the new one, never half a file.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import hashlib
import io
import itertools
import os
import sys
import tempfile
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

import orjson

from .errors import InputError

_SORTED = orjson.OPT_SORT_KEYS
_BUFFER = 1 << 20  # for reading and writing files


def dumps(obj: Any) -> bytes:
    """Compact JSON, keys in insertion order (deterministic for deterministic input)."""
    return orjson.dumps(obj)


def dumps_line(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)


def canonical_json(obj: Any) -> bytes:
    """Sorted-key JSON: the form every digest is taken over."""
    return orjson.dumps(obj, option=_SORTED)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(obj: Any) -> str:
    """sha256 of the canonical JSON of obj."""
    return sha256_bytes(canonical_json(obj))


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def open_maybe_gz(path: str | os.PathLike) -> IO[bytes]:
    path = str(path)
    # A large buffer: JSONL is read a line at a time, and with the default 8 KiB reading the lines costs 2-3x more.
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb", buffering=_BUFFER)


def iter_lines(path: str | os.PathLike) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, raw line without newline) for a .jsonl or .jsonl.gz file; blank lines skipped."""
    with open_maybe_gz(path) as f:
        yield from _numbered(f, 1)


def iter_lines_from(path: str | os.PathLike, offset: int, first_line: int) -> Iterator[tuple[int, bytes]]:
    """`iter_lines` from line `first_line` on, which starts at byte `offset` of a plain file (a gzipped one is
    read from its start, the lines before skipped)."""
    with open_maybe_gz(path) as f:
        if isinstance(f, gzip.GzipFile):
            yield from _numbered(itertools.islice(f, first_line - 1, None), first_line)
        else:
            f.seek(offset)
            yield from _numbered(f, first_line)


def iter_block_lines(block: bytes, first_line: int) -> Iterator[tuple[int, bytes]]:
    """`iter_lines` over `block`, whole lines of a file the first of which is line `first_line`."""
    return _numbered(io.BytesIO(block), first_line)


def _numbered(lines: Iterable[bytes], first_line: int) -> Iterator[tuple[int, bytes]]:
    for number, raw in enumerate(lines, start=first_line):
        if not raw.isspace():  # a blank line is all whitespace (a line read is never empty)
            yield number, raw.rstrip(b"\r\n")


def _json_error(line: bytes) -> str:
    """orjson's message for an invalid line without its newline (the positions it names count from there)."""
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return str(exc)
    return "invalid line"  # unreachable: JSON that parses without its newline parses with it


def read_jsonl(path: str | os.PathLike, *, display: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed object) per line. Invalid JSON raises InputError naming the file and line."""
    for number, _, obj in read_jsonl_lines(path, display=display):
        yield number, obj


def read_jsonl_lines(path: str | os.PathLike, *, display: str | None = None) -> Iterator[tuple[int, bytes, Any]]:
    """(line number, the line as read, parsed object) per line, as `read_jsonl`."""
    shown = display or str(path)
    if not Path(path).exists():
        raise InputError("file not found", path=shown)
    with open_maybe_gz(path) as f:
        for number, raw in enumerate(f, start=1):
            if raw.isspace():
                continue
            try:  # the line as read: its newline is JSON whitespace, so it need not be copied off first
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                error = _json_error(raw.rstrip(b"\r\n"))
                raise InputError(f"invalid JSON: {error}", path=shown, line=number) from None
            yield number, raw, obj


def load_json(path: str | os.PathLike) -> Any:
    try:
        return orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise InputError("file not found", path=str(path)) from None
    except orjson.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc}", path=str(path)) from None


def load_mapping(path: str | os.PathLike, *, what: str = "the config", empty: bool = False) -> dict[str, Any]:
    """A YAML or JSON file (YAML is a superset of JSON) that must hold a mapping; an empty file is {} when `empty`.
    Errors name the file."""
    import yaml  # only config readers need it

    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{what} file not found", path=str(path)) from None
    except yaml.YAMLError as exc:
        raise InputError(f"cannot parse {what}: {exc}", path=str(path)) from None
    if data is None and empty:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{what} must be a mapping", path=str(path))
    return data


class _NamedErrors:
    """An output file whose write errors (a full disk, a file-size limit) name the file written: the OSError of a
    write(2) carries no name, and a run writing several outputs at once must say which one failed."""

    shown: str = ""

    def write(self, data):
        try:
            return super().write(data)
        except OSError as exc:
            raise _named(exc, self.shown)

    def flush(self):
        try:
            return super().flush()
        except OSError as exc:
            raise _named(exc, self.shown)


class _Writer(_NamedErrors, io.BufferedWriter):
    pass


class _RandomWriter(_NamedErrors, io.BufferedRandom):  # an output read back before it is renamed ("w+b")
    pass


def _named(exc: OSError, path: str) -> OSError:
    if exc.filename is None:
        exc.filename = path
    return exc


def _temp_prefix(path: Path) -> str:
    return f".{path.name}."


def _remove_dead_temps(path: Path) -> None:
    """Remove the temp files that killed writers of `path` left beside it (`.NAME.PID.XXXX.tmp`, PID no longer
    running), so a kill -9 leaves no temp file behind once the output is written again. A live writer's file is
    kept."""
    prefix = _temp_prefix(path)
    try:
        entries = [e for e in os.scandir(path.parent) if e.name.startswith(prefix) and e.name.endswith(".tmp")]
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(prefix):].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(entry.path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: alive
        return True
    return True


class AtomicOutputs:
    """Outputs written together (`atomic_outputs`): each to a temp file beside it; at the end every file is
    flushed and fsynced before any is renamed, so a full disk on any of them leaves all the old ones in place."""

    def __init__(self) -> None:
        self._files: list[tuple[Path, str, IO]] = []

    def open(self, path: str | os.PathLike, mode: str = "wb") -> IO:
        if mode not in ("wb", "w", "w+b"):
            raise ValueError(f"atomic_write: unsupported mode {mode!r}")
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _remove_dead_temps(path)
            fd, tmp = tempfile.mkstemp(prefix=f"{_temp_prefix(path)}{os.getpid()}.", suffix=".tmp", dir=path.parent)
        except OSError as exc:
            raise _named(exc, str(path))
        try:
            # A large buffer: JSONL outputs are written a row at a time, and each flush of the default 8 KiB is a
            # system call.
            raw = io.FileIO(fd, "w+" if mode == "w+b" else "w")
            buffered = (_RandomWriter if mode == "w+b" else _Writer)(raw, buffer_size=_BUFFER)
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        buffered.shown = str(path)
        f = io.TextIOWrapper(buffered, encoding="utf-8") if mode == "w" else buffered
        self._files.append((path, tmp, f))
        return f

    def _commit(self) -> None:
        for path, _, f in self._files:
            f.flush()
            try:
                os.fsync(f.fileno())
            except OSError as exc:
                raise _named(exc, str(path))
            f.close()
        for path, tmp, _ in reversed(self._files):  # the first opened is renamed last (a summary marks the set)
            os.replace(tmp, path)
        self._files.clear()

    def _discard(self) -> None:
        for _, tmp, f in self._files:
            with contextlib.suppress(OSError, ValueError):
                f.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._files.clear()


@contextlib.contextmanager
def atomic_outputs() -> Iterator[AtomicOutputs]:
    """`outputs.open(path, mode)` for each file of a set; all are renamed into place only if the block and every
    file's flush succeed, the first opened last. A write that fails (ENOSPC, EFBIG) raises OSError naming its
    file; then no file of the set is replaced."""
    outputs = AtomicOutputs()
    try:
        yield outputs
        outputs._commit()
    except BaseException:
        outputs._discard()
        raise


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Write to a temp file beside `path`, fsync, and rename over it only if the block succeeds. A write that
    fails (ENOSPC, EFBIG) raises OSError naming `path`; the old file, if any, is untouched."""
    with atomic_outputs() as outputs:
        yield outputs.open(path, mode)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_write(path) as f:
        f.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path, "w") as f:
        f.write(text)


_RENAME_EXCHANGE = 2  # renameat2(2)'s flag: swap two paths in one step


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths atomically (Linux renameat2 with RENAME_EXCHANGE); False where unsupported."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        call = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_cwd = -100
    if call(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    if ctypes.get_errno() in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: this filesystem cannot swap
        return False
    raise _named(OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno())), str(b))


def replace_directory(new: str | os.PathLike, final: str | os.PathLike) -> None:
    """Put the finished directory `new` at `final`, replacing what is there, so that a kill at any point leaves
    the old directory or the new one at `final`, never neither: an atomic swap where the filesystem has one;
    elsewhere the old one is first moved aside beside it (`.NAME.old-PID`), a gap a kill can fall into."""
    import shutil

    new, final = Path(new), Path(final)
    if not final.exists():
        os.replace(new, final)
        return
    sys.audit("stateset_agents.replace_directory", new, final)  # a rename that os's audit events do not see
    if _exchange(new, final):
        shutil.rmtree(new)  # now the old directory
        return
    aside = final.with_name(f".{final.name}.old-{os.getpid()}")
    os.replace(final, aside)
    os.replace(new, final)
    shutil.rmtree(aside)


@contextlib.contextmanager
def rare_gc() -> Iterator[None]:
    """Parsed conversations are trees: reference counting frees them, and the cyclic collector's young-generation
    passes (every 700 allocations by default) find nothing but cost ~15% of a run (~30% of a plugin server's
    grading). Collect less often meanwhile."""
    before = gc.get_threshold()
    gc.set_threshold(50_000, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
