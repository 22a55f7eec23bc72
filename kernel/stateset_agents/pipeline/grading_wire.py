"""A grading worker's answer as a spool file, in a data-only format (no pickle: nothing in the kernel loads code
from a file, even one our own child wrote into a private folder).

A file is a 8-byte header length, a JSON header, then the raw bytes of every block of graded, curated and split
rows, in the order the header lists them. Floats go through JSON's shortest repr, which reads back to the same
bits: a tally merged from files equals one merged in memory.
"""
from __future__ import annotations

import json
import struct
from collections import Counter
from typing import IO, Any, Callable, Iterable

from .grading import ChunkFailure, ChunkResult, Tally

_LENGTH = struct.Struct("<Q")


def write_frame(f: IO[bytes], head: bytes, blobs: Iterable[bytes] = ()) -> None:
    """The framing every spool answer shares (`ingest_wire` too): the header's length, the header, the blobs."""
    f.write(_LENGTH.pack(len(head)))
    f.write(head)
    for blob in blobs:
        f.write(blob)


def read_header(f: IO[bytes], loads: Callable[[bytes], Any] = json.loads) -> tuple[dict, ChunkFailure | None]:
    """The header of a `write_frame` file, and the failure it carries, if it does."""
    (length,) = _LENGTH.unpack(f.read(_LENGTH.size))
    header = loads(f.read(length))
    return header, header_failure(header)


def read_blob(f: IO[bytes], size: int, who: str) -> bytes:
    """The next `size` bytes; an answer cut short is an error, never fewer rows."""
    blob = f.read(size)
    if len(blob) != size:
        raise EOFError(f"{who}'s answer is cut short: {size} bytes expected, {len(blob)} read")
    return blob


def failure_header(failure: ChunkFailure) -> dict:
    return {"failure": {"kind": failure.kind, "args": list(failure.args), "exit_code": failure.exit_code}}


def header_failure(header: dict) -> ChunkFailure | None:
    failure = header.get("failure")
    return None if failure is None else ChunkFailure(failure["kind"], tuple(failure["args"]), failure["exit_code"])


def write_result(f: IO[bytes], result: ChunkResult | ChunkFailure) -> None:
    blobs: list[bytes] = []

    def part(rows: tuple[bytes, int]) -> list[int]:
        blobs.append(rows[0])
        return [len(rows[0]), rows[1]]

    if isinstance(result, ChunkFailure):
        header = failure_header(result)
    else:
        tally = result.tally
        tally.fold(1)  # only the exact parts travel
        header = {"result": {
            "identity": result.identity, "counts": result.counts,
            "values": [[v, c] for v, c in tally.values.items()], "folded": tally.folded,
            "graded": part(result.graded), "curated": part(result.curated),
            "curated_marks": result.curated_marks,
            "splits": {name: part(rows) for name, rows in result.splits.items()},
        }}
    # json, not orjson: floats in JSON's shortest repr read back to the same bits
    write_frame(f, json.dumps(header, separators=(",", ":"), default=str).encode(), blobs)  # a failure's path: text


def read_result(f: IO[bytes]) -> ChunkResult | ChunkFailure:
    header, failure = read_header(f)
    if failure is not None:
        return failure
    r = header["result"]

    def part(size_rows: list[int]) -> tuple[bytes, int]:
        size, rows = size_rows
        return read_blob(f, size, "a grading worker"), rows

    tally = Tally()
    tally.values = Counter({v: c for v, c in r["values"]})
    tally.folded = {k: [parts, n] for k, (parts, n) in r["folded"].items()}
    graded, curated = part(r["graded"]), part(r["curated"])
    splits = {name: part(rows) for name, rows in r["splits"].items()}
    return ChunkResult(identity=r["identity"], counts=r["counts"], tally=tally, graded=graded, curated=curated,
                       curated_marks=[tuple(m) for m in r["curated_marks"]], splits=splits)
