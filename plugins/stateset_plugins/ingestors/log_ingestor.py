"""The reading loop every log format shares: lines in, conversations and rejects out, in input order.

A format only says what one parsed line is (`parse_line`): a complete conversation, or one API call to stitch.
"""
from __future__ import annotations

from typing import Any, Iterator

import orjson

from stateset_agents import Ingestor, Reject, Source
from stateset_agents.core.errors import StatesetError
from stateset_agents.core.jsonio import iter_lines

from .messages import LineError, Transcript
from .stitching import DEFAULT_WINDOW, Call, Stitcher


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

    def ingest(self, source: Source) -> Iterator[dict[str, Any] | Reject]:
        stitcher = Stitcher(source, self.config.get("stitch_window", DEFAULT_WINDOW))
        for line, raw in iter_lines(source.local_path):
            if self.cancelled:
                raise StatesetError(f"ingest of {source.path} cancelled at line {line}")
            yield from stitcher.expire(line)
            try:
                parsed = self.parse_line(orjson.loads(raw))
                # `add` digests the call before it changes anything, so a call too deep to digest leaves no trace.
                stitched = list(stitcher.add(parsed, line)) if isinstance(parsed, Call) else None
            except orjson.JSONDecodeError as exc:
                yield Reject(path=source.path, line=line, reason="invalid_json", detail=f"invalid JSON: {exc}")
                continue
            except LineError as exc:
                yield exc.reject(source.path, line)
                continue
            except orjson.JSONEncodeError:  # JSON nested deeper than orjson writes (254 levels; it reads 1024)
                yield Reject(path=source.path, line=line, reason="too_deep",
                             detail="the line nests deeper than JSON output allows (254 levels)")
                continue
            if stitched is not None:
                yield from stitched
            else:
                yield parsed.conversation(source.path, source.sha256, line)
        yield from stitcher.finish()
