"""A worker's answer goes through its spool file as data: every field reads back equal, floats to the bit, and an
error still names its file, line and field."""
from __future__ import annotations

import io
from pathlib import Path

from stateset_agents.core.errors import InputError
from stateset_agents.pipeline.grading import ChunkFailure, ChunkResult, Tally
from stateset_agents.pipeline.grading_wire import read_result, write_result


def _round_trip(result):
    f = io.BytesIO()
    write_result(f, result)
    f.seek(0)
    back = read_result(f)
    assert f.read() == b""  # nothing left over: the header said how long each block is
    return back


def test_a_result_reads_back_equal_to_the_bit():
    tally = Tally()
    for i in range(5000):  # more than one fold, and values whose plain sum would round
        tally.add(0.1 * (i % 7), {"format": 0.1 + i * 1e-17, "tone": 1 / 3, "note": "not a number"})
    result = ChunkResult({"name": "toy", "version": "1"}, {"turns_graded": 5000}, tally,
                         (b'{"a":1}\n\xff\x00raw\n', 2), (b"", 0), [(0, 0, 7, 3), (1, 7, 9, 4)],
                         {"validation": (b"v\n", 1), "test": (b"", 0)})
    expected = Tally()
    expected.merge(tally)
    back = _round_trip(result)
    assert (back.identity, back.counts, back.graded, back.curated, back.curated_marks, back.splits) == (
        result.identity, result.counts, result.graded, result.curated, result.curated_marks, result.splits)
    merged = Tally()
    merged.merge(back.tally)
    assert merged.summary() == expected.summary()
    assert back.tally.values == tally.values


def test_a_failure_keeps_file_line_and_field():
    failure = ChunkFailure.of(InputError("not JSON", path=Path("/logs/in.jsonl"), line=42, field="messages"), "x")
    error = _round_trip(failure).error()
    assert isinstance(error, InputError)
    assert "/logs/in.jsonl" in str(error) and "42" in str(error) and "messages" in str(error)
    assert error.exit_code == failure.exit_code
