"""An ingest worker's answer as a spool file, in a data-only format (no pickle: nothing in the kernel loads code
from a file, even one our own child wrote into a private folder), framed as `grading_wire` frames grading's.

A file is an 8-byte header length, a JSON header, then the chunk's rows (transcript and reject lines, in item
order). The header lists the items: `["r", reason, row size]` for a reject the ingestor yielded,
`["c", lines read, call log, lines, digests (hex) or null, id, row size, redactions]` for a conversation.
"""
from __future__ import annotations

from typing import IO

import orjson

from .grading import ChunkFailure
from .grading_wire import failure_header, read_blob, read_header, write_frame
from .ingest_state import Prepared
from .ingest_chunks import IngestedChunk, PreparedReject


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
    if isinstance(result, ChunkFailure):
        write_frame(f, orjson.dumps(failure_header(result), default=str))  # a failure's path: its text
        return
    header = {"result": {"items": [_item(i) for i in result.items], "last_line": result.last_line,
                         "rows": len(result.rows)}}
    write_frame(f, orjson.dumps(header), (result.rows,))


def read_ingested(f: IO[bytes]) -> IngestedChunk | ChunkFailure:
    header, failure = read_header(f, orjson.loads)
    if failure is not None:
        return failure
    r = header["result"]
    rows = read_blob(f, r["rows"], "an ingest worker")
    return IngestedChunk([_unitem(i) for i in r["items"]], rows, r["last_line"])
