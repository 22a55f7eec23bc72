"""What one ingest run keeps, whatever parses it (`ingest` on one process, `ingest_parallel` on several): the
outputs being written, the counts, the duplicate and id sets, and the per-conversation work that needs nothing but
the conversation (`prepare_conversation`: digests, the transcript line, redaction), which a worker can do.

What grows with the input is only the set of conversation digests and ids seen, for duplicate removal: 16-byte
digests in one flat table (`DigestSet`: two fixed 2 MiB tables up to ~115,000 conversations, 37-73 bytes a
conversation beyond, no Python object per entry); the plugin's own state must be bounded too (the first-party
ingestors' call-log stitching is).
"""
from __future__ import annotations

import hashlib
import os
import time
from collections import Counter
from collections.abc import Mapping  # typing's alias makes every isinstance check several times slower
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterable, NamedTuple

from ..core.components import Reject, Source
from ..core.errors import InputError, PluginError
from ..core.jsonio import canonical_json, dumps_line
from .redact import redact_conversation

TRANSCRIPTS = "transcripts.jsonl"
REJECTS = "rejects.jsonl"
SUMMARY = "ingest_summary.json"
INPUT_SUFFIXES = (".jsonl", ".jsonl.gz")
REDACTION_LABELS = ("EMAIL", "PHONE", "CARD", "IBAN", "IP", "SSN")
MAX_NESTING = 254  # the deepest JSON orjson writes
#: Input bytes per chunk with `workers` > 1 (whole lines), as `improve run`'s.
CHUNK_BYTES = 1 << 20

#: Receives `{"path", "file_index", "files", "line", "read", "written", "duplicates", "rejected"}` now and then.
ProgressFn = Callable[[dict[str, Any]], None]
_PROGRESS_EVERY_S = 0.1


def input_files(inputs: str | os.PathLike) -> list[str]:
    """The files to read, as paths built from what the user gave (a relative path stays relative)."""
    given = os.fspath(inputs)
    if os.path.isdir(given):
        names = sorted(n for n in os.listdir(given)
                       if n.endswith(INPUT_SUFFIXES) and os.path.isfile(os.path.join(given, n)))
        if not names:
            raise InputError("no .jsonl or .jsonl.gz files in this directory", path=given)
        return [os.path.join(given, n) for n in names]
    if os.path.isfile(given):
        return [given]
    raise InputError("no such file or directory", path=given)


class _Output:
    """A JSONL output being written: counts its rows and hashes its bytes for the summary."""

    def __init__(self, file: IO[bytes], name: str):
        self.file, self.name, self.rows, self._sha = file, name, 0, hashlib.sha256()

    def write(self, row: Mapping[str, Any]) -> None:
        self.write_bytes(dumps_line(row))

    def write_bytes(self, data: bytes | memoryview) -> None:
        """A row already serialized (by `prepare_conversation`)."""
        self.file.write(data)
        self._sha.update(data)
        self.rows += 1

    def describe(self) -> dict[str, Any]:
        return {"file": self.name, "rows": self.rows, "sha256": self._sha.hexdigest()}


@dataclass
class _Tally:
    read: int = 0
    conversations: int = 0
    written: int = 0
    duplicates: int = 0
    rejected: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)

    def add(self, other: "_Tally") -> None:
        for key, value in other.__dict__.items():
            setattr(self, key, getattr(self, key) + value)


_SOURCE_KEYS = frozenset(("path", "sha256", "line"))


@dataclass
class _Ingest:
    """The state of one run across its input files. Counts go to the current file's tally; the totals are the sum
    of the files' tallies, added as each file ends."""

    transcripts: _Output
    rejects: _Output
    redact: bool
    totals: _Tally = field(default_factory=_Tally)
    reasons: Counter[str] = field(default_factory=Counter)
    redactions: Counter[str] = field(default_factory=Counter)
    call_logs: Counter[str] = field(default_factory=Counter)
    seen_content: "DigestSet" = field(default_factory=lambda: DigestSet())
    seen_ids: "DigestSet" = field(default_factory=lambda: DigestSet())

    def items(self, items: Iterable[Any], source: Source, tally: _Tally, who: str, report: Callable[..., None],
              lines_wanted: bool) -> None:
        """What the ingestor yielded for `source` (or a part of it), in order."""
        for item in items:
            if isinstance(item, dict) or isinstance(item, Mapping):  # a dict, the common case, checked cheaply
                self.conversation(item, source, tally, who)
                if lines_wanted:
                    report(int((item.get("source") or {}).get("line") or 0))
            elif isinstance(item, Reject):
                self.rejected_line(item, tally)
                report(item.line)
            else:
                raise PluginError(who, "ingest", f"yielded a {type(item).__name__}, not a conversation or Reject")

    def rejected_line(self, reject: Reject, tally: _Tally) -> None:
        tally.read += 1
        self._reject(reject, tally)

    def _reject(self, reject: Reject, tally: _Tally) -> None:
        self.rejects.write(reject.as_dict())
        self.reasons[reject.reason] += 1
        tally.rejected += 1

    def _reject_lines(self, path: str, lines: list[int], reason: str, field: str | None, detail: str,
                      tally: _Tally) -> None:
        """Reject a whole conversation: one reject for each line it was made of (a stitched one has several), so
        every line read is written, a duplicate, or a reject."""
        for line in lines:
            self._reject(Reject(path=path, line=line, reason=reason, field=field, detail=detail), tally)

    def _count(self, tally: _Tally, lines_read: int, call_log: tuple[int, int] | None) -> None:
        if call_log is not None:
            self.call_logs.update(calls=call_log[0], conversations=1, unstitched=call_log[1])
        tally.read += lines_read
        tally.conversations += 1

    def conversation(self, conv: Mapping[str, Any], source: Source, tally: _Tally, who: str) -> None:
        """One conversation the ingestor yielded: prepared as a worker prepares it, then kept or rejected."""
        item, row = prepare_conversation(conv, source, who, self.redact)
        self.prepared(item, source.path, tally, row)

    def prepared(self, item: "Prepared", path: str, tally: _Tally, rows: bytes | memoryview) -> None:
        """What needs the whole run's state, for a conversation `prepare_conversation` prepared (here or in a
        worker): counts, duplicate and id checks, writing. `rows`: its transcript line."""
        self._count(tally, item.lines_read, item.call_log)
        if item.digests is None:
            self._reject_lines(path, item.lines, "too_deep", None, _TOO_DEEP, tally)
            return
        if not self.seen_content.add(item.digests[:16]):
            tally.duplicates += 1
            return
        if not self.seen_ids.add(item.digests[16:]):
            self._reject_lines(path, item.lines, "duplicate_id", "id", _duplicate_id(item.conv_id), tally)
            return
        if item.redactions:
            self.redactions.update(item.redactions)
        self.transcripts.write_bytes(rows)
        tally.written += 1

    def prepared_reject(self, reason: str, tally: _Tally, row: memoryview) -> None:
        """`rejected_line` for a reject a worker wrote (`row`)."""
        tally.read += 1
        self.rejects.write_bytes(row)
        self.reasons[reason] += 1
        tally.rejected += 1


_TOO_DEEP = f"the conversation nests deeper than JSON output allows ({MAX_NESTING} levels)"


def _duplicate_id(conv_id: str) -> str:
    return f"id {conv_id!r} was already used by a different conversation earlier in the input; ids must be unique"


def _locate(conv: Mapping[str, Any], source: Source,
            who: str) -> tuple[list[Any], dict[str, Any], int, tuple[int, int] | None]:
    """A conversation's messages, its `source` as written, the lines it was read from, and (for a stitched call
    log) its (calls, unstitched) counts."""
    messages = conv.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PluginError(who, "ingest", f"yielded a conversation without messages from {source.path}")
    logged = conv.get("source")
    if not isinstance(logged, dict) and not isinstance(logged, Mapping):
        logged = {}
    # Path and sha256 are the kernel's to say; the line (and any extra, like a stitched call's lines) the plugin's.
    where = {"path": source.path, "sha256": source.sha256, "line": int(logged.get("line") or 0)}
    lines_read, call_log = 1, None
    if not _SOURCE_KEYS.issuperset(logged):
        where.update((k, v) for k, v in logged.items() if k not in _SOURCE_KEYS)
        if "lines" in where:
            lines_read = len(where["lines"]) if isinstance(where["lines"], list) else 1
            call_log = (lines_read, int(bool(where.get("unstitched"))))
    return messages, where, lines_read, call_log


def _content_digest(messages: list[Any], tools: Any, metadata: Any, who: str, source: Source,
                    line: int) -> bytes | None:
    """The sha256 of the conversation's canonical content; None when it nests too deep to be written."""
    try:
        return hashlib.sha256(canonical_json({"messages": messages, "tools": tools, "metadata": metadata})).digest()
    except TypeError as exc:  # orjson's JSONEncodeError
        if "recursion" not in str(exc).lower():
            raise PluginError(who, "ingest", f"yielded a conversation that is not JSON ({exc}) from "
                                             f"{source.path}, line {line}") from None
        # Valid JSON nested deeper than any JSON output can be written (a line may nest 1024 levels,
        # orjson writes 254): the line's fault, so its reject, not a failed run.
        return None


def _lines_of(where: Mapping[str, Any]) -> list[int]:
    """The lines a conversation was made of (a stitched one has several)."""
    lines = where.get("lines")
    if not isinstance(lines, list) or not lines:
        return [where["line"]]
    return [line if isinstance(line, int) else where["line"] for line in lines]


def _conversation_id(conv: Mapping[str, Any], content: bytes) -> str:
    return str(conv.get("id") or "") or f"conv-{content[:8].hex()}"


def _row(conv: Mapping[str, Any], conv_id: str, where: dict[str, Any], messages: list[Any], tools: Any,
         metadata: Any) -> dict[str, Any]:
    row = {"id": conv_id, "source": where, "messages": messages, "tools": tools, "metadata": metadata}
    if not row.keys() >= conv.keys():
        row.update((k, v) for k, v in conv.items() if k not in row)
    return row


class Prepared(NamedTuple):
    """A conversation as a worker leaves it for the parent (`prepare_conversation`): everything `_Ingest.
    conversation` works out from the conversation alone. `digests`: the content's 16 bytes then the id's; None
    for a conversation too deep to write (its lines are rejected)."""

    lines_read: int
    call_log: tuple[int, int] | None
    lines: list[int]
    digests: bytes | None
    conv_id: str | None
    row_size: int
    redactions: dict[str, int] | None


def prepare_conversation(conv: Mapping[str, Any], source: Source, who: str,
                         redact: bool) -> tuple[Prepared, bytes]:
    """A worker's share of `_Ingest.conversation`: the prepared conversation and its transcript line (b"" for
    one too deep to write)."""
    messages, where, lines_read, call_log = _locate(conv, source, who)
    tools, metadata = conv.get("tools") or [], conv.get("metadata") or {}
    content = _content_digest(messages, tools, metadata, who, source, where["line"])
    lines = _lines_of(where)
    if content is None:
        return Prepared(lines_read, call_log, lines, None, None, 0, None), b""
    conv_id = _conversation_id(conv, content)
    row = _row(conv, conv_id, where, messages, tools, metadata)
    redactions = dict(redact_conversation(row)) if redact else None
    data = dumps_line(row)
    return Prepared(lines_read, call_log, lines, content[:16] + _id_digest(conv_id), conv_id, len(data),
                    redactions), data


def _id_digest(conv_id: str) -> bytes:
    """What the id set keeps of an id: 16 bytes of its BLAKE2b digest. Two different ids share it with probability
    2**-128 a pair (as two different conversations share a content fingerprint), so in practice the check is exact."""
    return hashlib.blake2b(conv_id.encode("utf-8", "surrogatepass"), digest_size=16).digest()


class DigestSet:
    """A set of 16-byte digests in one flat bytearray, in constant memory per entry: a hash table of buckets of
    8 slots of 16 bytes, indexed by the digest's own first bytes (digests are uniform), probing to the next bucket
    when one is full, doubling at 7/8 full; a byte a bucket counts its filled slots. 18-37 bytes a digest once
    past the initial table (2 MiB, room for ~115k digests before the first doubling, which re-inserts every digest
    one by one), against ~100 for a Python set of bytes objects; exact (digests are compared whole); a lookup is
    one C-level `find` over the filled part of a bucket."""

    _SLOTS = 8
    _WIDTH = _SLOTS * 16  # bytes in a bucket

    def __init__(self, buckets: int = 1 << 14):
        if buckets < 1 or buckets & (buckets - 1):
            raise ValueError("the number of buckets must be a power of two")
        self._table = bytearray(buckets * self._WIDTH)
        self._fill = bytearray(buckets)  # slots used in each bucket; they fill in order, nothing is deleted
        self._mask = buckets - 1
        self._count = 0
        self._limit = buckets * self._SLOTS * 7 // 8

    def __len__(self) -> int:
        return self._count

    def __contains__(self, digest: bytes) -> bool:
        return self._probe(digest)[0]

    def add(self, digest: bytes) -> bool:
        """Add `digest`; False when it was already there."""
        found, bucket, end = self._probe(digest)
        if found:
            return False
        self._table[end:end + 16] = digest
        self._fill[bucket] += 1
        self._count += 1
        if self._count > self._limit:
            self._grow()
        return True

    def _probe(self, digest: bytes) -> tuple[bool, int, int]:
        """(True, ...) when `digest` is present, else (False, the bucket it goes in, its free slot's offset)."""
        if len(digest) != 16:
            raise ValueError("DigestSet holds 16-byte digests")
        table, fill, width, mask = self._table, self._fill, self._WIDTH, self._mask
        bucket = int.from_bytes(digest, "little") & mask
        while True:
            start = bucket * width
            n = fill[bucket]
            end = start + n * 16
            at = table.find(digest, start, end)
            while at >= 0 and (at - start) & 15:  # a match across two slots: keep looking
                at = table.find(digest, at + 1, end)
            if at >= 0:
                return True, bucket, at
            if n < self._SLOTS:
                return False, bucket, end  # a bucket with room ends the probe: no later bucket holds it
            bucket = (bucket + 1) & mask

    def _grow(self) -> None:
        old, old_fill, width = self._table, self._fill, self._WIDTH
        buckets = len(old_fill) * 2
        table = self._table = bytearray(buckets * width)
        fill = self._fill = bytearray(buckets)
        mask = self._mask = buckets - 1
        self._limit *= 2
        for old_bucket, n in enumerate(old_fill):
            start = old_bucket * width
            for offset in range(start, start + n * 16, 16):
                digest = old[offset:offset + 16]
                bucket = int.from_bytes(digest, "little") & mask
                while fill[bucket] == self._SLOTS:
                    bucket = (bucket + 1) & mask
                at = bucket * width + fill[bucket] * 16
                table[at:at + 16] = digest
                fill[bucket] += 1


class InputSteps:
    """The per-file side of a run, file after file: each file's tally and progress, and its entry in the summary
    once it ends."""

    def __init__(self, sources: list[Source], progress: ProgressFn | None):
        self.sources, self.progress = sources, progress
        self.per_file: list[dict[str, Any]] = []
        self.current = -1
        self.tally, self.report = _Tally(), _progress_reporter(None, "", 0, 0, _Tally())

    def start(self, index: int) -> tuple[_Tally, Callable[..., None]]:
        self.current = index
        source = self.sources[index]
        self.tally = _Tally()
        self.report = _progress_reporter(self.progress, source.path, index + 1, len(self.sources), self.tally)
        self.report(0, force=True)
        return self.tally, self.report

    def finish(self, run: "_Ingest") -> None:
        source = self.sources[self.current]
        self.report(None, force=True)
        run.totals.add(self.tally)
        self.per_file.append({"path": source.path, "sha256": source.sha256, **self.tally.as_dict()})


def _progress_reporter(progress: ProgressFn | None, path: str, index: int, files: int,
                       tally: _Tally) -> Callable[..., None]:
    """Calls `progress` at most every 0.1 s (and when forced), so a fast ingest is not slowed by its display."""
    last = [0.0]

    def report(line: int | None, force: bool = False) -> None:
        now = time.monotonic()
        if progress is None or (not force and now - last[0] < _PROGRESS_EVERY_S):
            return
        last[0] = now
        progress({"path": path, "file_index": index, "files": files, "line": line, **tally.as_dict()})

    return report
