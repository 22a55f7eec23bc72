"""The reading loop every log format shares: lines in, conversations and rejects out, in input order.

A format only says what one parsed line is (`parse_line`): a complete conversation, or one API call to stitch.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import orjson

from stateset_agents import Ingestor, LinesNeedContext, Reject, Source
from stateset_agents.core.errors import StatesetError
from stateset_agents.core.jsonio import iter_lines

from .messages import LineError, Transcript
from .stitching import DEFAULT_WINDOW, Call, Stitcher


# orjson reads JSON nested up to 1024 levels but writes only 254, and a transcript nests up to 2 levels deeper than
# its line (a call's own keys land in metadata.call_log[i]): a deeper line could be read but never written, so it is
# rejected as it is read. Nesting 253 levels takes at least 253 opening brackets: a line with fewer (counted in C,
# strings included, so never an undercount) needs no check.
MAX_LINE_DEPTH = 252


def _may_be_too_deep(raw: bytes) -> bool:
    return raw.count(b"[") + raw.count(b"{") > MAX_LINE_DEPTH


def _too_deep() -> LineError:
    return LineError("too_deep", f"the line nests more than {MAX_LINE_DEPTH} levels deep, deeper than a transcript "
                                 "can be written")


def _check_depth(record: Any) -> None:
    """Raise `too_deep` for a record nested more than MAX_LINE_DEPTH levels. Serialising it inside two more levels
    (orjson refuses past 254) costs a fraction of parsing it, and is exact."""
    try:
        orjson.dumps([[record]])
    except orjson.JSONEncodeError:
        raise _too_deep() from None


class LogIngestor(Ingestor):
    capabilities = ("stitch_call_logs",)
    config_schema = {
        "type": "object",
        "properties": {
            "stitch_window": {
                "type": "integer", "minimum": 1,
                "description": "A stitched conversation no call has extended for this many lines is finished.",
            },
        },
        "additionalProperties": False,
    }

    def parse_line(self, record: Any) -> Transcript | Call:
        """One parsed JSON line. Raise `LineError` for a line that cannot be ingested."""
        raise NotImplementedError

    # A line is a conversation or a reject on its own, except a call (stitched with the other calls of its
    # conversation): a run of lines without calls ingests alone and leaves the stitcher empty.
    splittable = True

    def ingest(self, source: Source) -> Iterator[dict[str, Any] | Reject]:
        return self.ingest_lines(source, iter_lines(source.local_path))

    def ingest_lines(self, source: Source, lines: Iterable[tuple[int, bytes]], *,
                     part: bool = False) -> Iterator[dict[str, Any] | Reject]:
        stitcher = Stitcher(source, self.config.get("stitch_window", DEFAULT_WINDOW))
        for line, raw in lines:
            if self.cancelled:
                raise StatesetError(f"ingest of {source.path} cancelled at line {line}")
            yield from stitcher.expire(line)
            try:
                record = orjson.loads(raw)
                if _may_be_too_deep(raw):
                    _check_depth(record)
                parsed = self.parse_line(record)
                if part and isinstance(parsed, Call):
                    raise LinesNeedContext(f"{source.path}, line {line} is a call log")
                # `add` digests the call before it changes anything, so a call too deep to digest leaves no trace.
                stitched = list(stitcher.add(parsed, line)) if isinstance(parsed, Call) else None
            except orjson.JSONDecodeError as exc:
                yield Reject(path=source.path, line=line, reason="invalid_json", detail=f"invalid JSON: {exc}")
                continue
            except LineError as exc:
                yield exc.reject(source.path, line)
                continue
            except orjson.JSONEncodeError:  # left for a format that serialises more deeply than its line nests
                yield _too_deep().reject(source.path, line)
                continue
            if stitched is not None:
                yield from stitched
            else:
                yield parsed.conversation(source.path, source.sha256, line)
        yield from stitcher.finish()
