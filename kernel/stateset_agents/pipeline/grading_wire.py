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
from typing import IO

from .grading import ChunkFailure, ChunkResult, Tally

_LENGTH = struct.Struct("<Q")


def write_result(f: IO[bytes], result: ChunkResult | ChunkFailure) -> None:
    blobs: list[bytes] = []

    def part(rows: tuple[bytes, int]) -> list[int]:
        blobs.append(rows[0])
        return [len(rows[0]), rows[1]]

    if isinstance(result, ChunkFailure):
        header = {"failure": {"kind": result.kind, "args": list(result.args), "exit_code": result.exit_code}}
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
    head = json.dumps(header, separators=(",", ":"), default=str).encode()  # a failure's path: its text
    f.write(_LENGTH.pack(len(head)))
    f.write(head)
    for blob in blobs:
        f.write(blob)


def read_result(f: IO[bytes]) -> ChunkResult | ChunkFailure:
    (length,) = _LENGTH.unpack(f.read(_LENGTH.size))
    header = json.loads(f.read(length))
    if "failure" in header:
        failure = header["failure"]
        return ChunkFailure(failure["kind"], tuple(failure["args"]), failure["exit_code"])
    r = header["result"]

    def part(size_rows: list[int]) -> tuple[bytes, int]:
        size, rows = size_rows
        blob = f.read(size)
        if len(blob) != size:
            raise EOFError(f"a grading worker's answer is cut short: {size} bytes expected, {len(blob)} read")
        return blob, rows

    tally = Tally()
    tally.values = Counter({v: c for v, c in r["values"]})
    tally.folded = {k: [parts, n] for k, (parts, n) in r["folded"].items()}
    graded, curated = part(r["graded"]), part(r["curated"])
    splits = {name: part(rows) for name, rows in r["splits"].items()}
    return ChunkResult(identity=r["identity"], counts=r["counts"], tally=tally, graded=graded, curated=curated,
                       curated_marks=[tuple(m) for m in r["curated_marks"]], splits=splits)
