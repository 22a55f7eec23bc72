"""An ingest worker's answer as a spool file, in a data-only format (no pickle: nothing in the kernel loads code
from a file, even one our own child wrote into a private folder), as `grading_wire` is for grading.

A file is an 8-byte header length, a JSON header, then the chunk's rows (transcript and reject lines, in item
order). The header lists the items: `["r", reason, row size]` for a reject the ingestor yielded,
`["c", lines read, call log, lines, digests (hex) or null, id, row size, redactions]` for a conversation.
"""
from __future__ import annotations

import struct
from typing import IO

import orjson

from .grading import ChunkFailure
from .ingest import Prepared
from .ingest_chunks import IngestedChunk, PreparedReject

_LENGTH = struct.Struct("<Q")


def _item(item: Prepared | PreparedReject) -> list:
    if isinstance(item, PreparedReject):
        return ["r", item.reason, item.row_size]
    return ["c", item.lines_read, item.call_log, item.lines, None if item.digests is None else item.digests.hex(),
            item.conv_id, item.row_size, item.redactions]


def _unitem(raw: list) -> Prepared | PreparedReject:
    if raw[0] == "r":
        return PreparedReject(raw[1], raw[2])
    _, lines_read, call_log, lines, digests, conv_id, row_size, redactions = raw
    return Prepared(lines_read, None if call_log is None else tuple(call_log), lines,
                    None if digests is None else bytes.fromhex(digests), conv_id, row_size, redactions)


def write_ingested(f: IO[bytes], result: IngestedChunk | ChunkFailure) -> None:
    rows = b""
    if isinstance(result, ChunkFailure):
        header = {"failure": {"kind": result.kind, "args": list(result.args), "exit_code": result.exit_code}}
    else:
        header = {"result": {"items": [_item(i) for i in result.items], "last_line": result.last_line,
                             "rows": len(result.rows)}}
        rows = result.rows
    head = orjson.dumps(header, default=str)  # a failure's path: its text
    f.write(_LENGTH.pack(len(head)))
    f.write(head)
    f.write(rows)


def read_ingested(f: IO[bytes]) -> IngestedChunk | ChunkFailure:
    (length,) = _LENGTH.unpack(f.read(_LENGTH.size))
    header = orjson.loads(f.read(length))
    if "failure" in header:
        failure = header["failure"]
        return ChunkFailure(failure["kind"], tuple(failure["args"]), failure["exit_code"])
    r = header["result"]
    rows = f.read(r["rows"])
    if len(rows) != r["rows"]:
        raise EOFError(f"an ingest worker's answer is cut short: {r['rows']} bytes expected, {len(rows)} read")
    return IngestedChunk([_unitem(i) for i in r["items"]], rows, r["last_line"])
