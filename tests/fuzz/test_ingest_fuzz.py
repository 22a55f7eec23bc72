"""Property tests of `ingest` (issue 24), through `run_ingest` on a file as the CLI runs it, for every first-party
format: OpenAI conversations, OpenAI call logs (stitched), Anthropic conversations and call logs.

For generated lines and real lines mutated (tau-airline's logs, the sample support logs): no crash, only rejects;
every line accounted for exactly once; a good line is never lost or changed because a neighbour is bad; a rerun
writes the same bytes.
"""
from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.fuzzing import examples

from .corpus import (
    call_log_lines,
    check_accounting,
    content,
    conversation_line,
    deep,
    ingest,
    json_values,
    mutated_line,
    seed,
    seed_records,
    seeds,
    without_lines,
)

FORMATS = ("openai", "anthropic")
SEEDS = len(seeds())


def distinct_records(least: int, most: int) -> st.SearchStrategy[list[dict]]:
    return st.lists(st.integers(0, SEEDS - 1), min_size=least, max_size=most, unique=True).map(
        lambda picks: [seed(i) for i in picks])
formats = st.sampled_from(FORMATS)


@st.composite
def real_lines(draw, fmt: str) -> list[str]:
    """Real lines of `fmt`: whole conversations and the call logs of others, keyed or not (each of a different
    conversation)."""
    lines = []
    for record in draw(distinct_records(1, 3)):
        kind = draw(st.sampled_from(("conversation", "calls", "keyed calls")))
        lines += ([conversation_line(record, fmt)] if kind == "conversation"
                  else call_log_lines(record, fmt, keyed=kind == "keyed calls"))
    return lines


@st.composite
def bad_line(draw, fmt: str) -> bytes:
    """A line no format can ingest, of one of the ways real logs break."""
    record = draw(seed_records)
    line = conversation_line(record, fmt)
    kind = draw(st.sampled_from(("cut", "not_utf8", "scalar", "no_messages", "role", "orphan", "content", "deep",
                                 "error", "no_response")))
    if kind == "cut":
        return line.encode()[:draw(st.integers(1, len(line) - 1))]
    if kind == "not_utf8":
        return line.encode().replace(b'"', b'"\xff', 1)
    if kind == "scalar":
        return json.dumps(draw(st.one_of(st.integers(), st.text(max_size=5), st.none()))).encode()
    parsed = json.loads(line)
    if kind == "no_messages":
        parsed["messages"] = draw(st.sampled_from(([], None, {}, "hi")))
    elif kind == "role":
        parsed["messages"][-1]["role"] = draw(st.sampled_from(("robot", "", 7, None)))
    elif kind == "orphan":
        parsed["messages"].append({"role": "tool", "tool_call_id": "never-called", "content": "x"} if fmt == "openai"
                                  else {"role": "user", "content": [{"type": "tool_result",
                                                                     "tool_use_id": "never-called"}]})
    elif kind == "content":
        parsed["messages"][0]["content"] = draw(st.sampled_from((7, {"a": 1}, [{"type": 3}], [5])))
    elif kind == "deep":
        parsed["metadata"] = {"nested": deep("x", draw(st.integers(254, 1020)))}
    elif kind == "error":
        return json.dumps({"request": {"messages": parsed["messages"]},
                           "response": {"type": "error", "error": {"message": "overloaded"}}}).encode()
    else:
        return json.dumps({"request": {"messages": parsed["messages"]}}).encode()
    return json.dumps(parsed).encode()


@given(fmt=formats, data=st.data())
@examples(25)
def test_mutated_real_lines_never_crash_and_every_line_is_accounted_for(fmt, data):
    lines = data.draw(real_lines(fmt))
    for i in data.draw(st.lists(st.integers(0, len(lines) - 1), max_size=3)):
        lines[i] = data.draw(mutated_line(lines[i]))
    lines.insert(data.draw(st.integers(0, len(lines))), data.draw(st.sampled_from(("", "   ", "\t\r"))))
    run = ingest(fmt, lines, redact=data.draw(st.booleans()))
    check_accounting(run)


@given(fmt=formats, values=st.lists(json_values, min_size=1, max_size=6))
@examples(20)
def test_generated_json_lines_are_rejected_or_ingested_never_a_crash(fmt, values):
    check_accounting(ingest(fmt, [json.dumps(v) for v in values]))


@given(fmt=formats, data=st.data())
@examples(15)
def test_a_duplicate_is_the_same_content_as_a_written_conversation(fmt, data):
    lines = [conversation_line(r, fmt) for r in data.draw(distinct_records(1, 3))]
    lines += [lines[i] for i in data.draw(st.lists(st.integers(0, len(lines) - 1), min_size=1, max_size=3))]
    run = ingest(fmt, lines)
    duplicates = check_accounting(run)
    assert len(duplicates) == run.summary["duplicates"]
    written = {content(c) for c in run.transcripts}
    for n in duplicates:
        alone = ingest(fmt, [run.lines[n - 1]])
        assert [content(c) for c in alone.transcripts][0] in written


@given(fmt=formats, data=st.data())
@examples(25)
def test_good_lines_come_out_the_same_whatever_bad_lines_lie_between_them(fmt, data):
    good = data.draw(real_lines(fmt))
    alone = ingest(fmt, good)
    assert alone.rejects == [] and alone.transcripts
    mixed, bad_at = [], []
    for line in good:
        for _ in range(data.draw(st.integers(0, 2))):
            mixed.append(data.draw(bad_line(fmt)))
            bad_at.append(len(mixed))
        mixed.append(line.encode())
    mixed.append(data.draw(bad_line(fmt)))
    bad_at.append(len(mixed))
    run = ingest(fmt, mixed)
    check_accounting(run)
    assert sorted(r["line"] for r in run.rejects) == bad_at
    assert [without_lines(c) for c in run.transcripts] == [without_lines(c) for c in alone.transcripts]
    assert sorted(n for c in run.transcripts for n in run.where(c)) == [
        n for n in range(1, len(mixed) + 1) if n not in bad_at]


@given(fmt=formats, data=st.data())
@examples(15)
def test_interleaved_call_logs_stitch_as_they_do_alone(fmt, data):
    """Concurrent conversations' calls, in any order that keeps each conversation's own order, with bad lines
    among them, stitch into the conversations each one's calls make alone."""
    records = data.draw(distinct_records(2, 3))
    keyed = data.draw(st.booleans())
    streams = [call_log_lines(r, fmt, keyed=keyed) for r in records]
    expected = []
    for stream in streams:
        expected += [without_lines(c) for c in ingest(fmt, stream).transcripts]
    merged, cursors = [], [0] * len(streams)
    while any(c < len(s) for c, s in zip(cursors, streams)):
        ready = [i for i, s in enumerate(streams) if cursors[i] < len(s)]
        i = data.draw(st.sampled_from(ready))
        merged.append(streams[i][cursors[i]].encode())
        cursors[i] += 1
        if data.draw(st.integers(0, 4)) == 0:
            merged.append(data.draw(bad_line(fmt)))
    run = ingest(fmt, merged)
    check_accounting(run)
    key = lambda c: json.dumps(c["messages"], sort_keys=True)  # noqa: E731 - the order of finishing differs
    assert sorted(map(without_lines, run.transcripts), key=key) == sorted(expected, key=key)


@given(fmt=formats, data=st.data())
@examples(10)
def test_a_rerun_writes_the_same_bytes(fmt, data, tmp_path_factory):
    lines = data.draw(real_lines(fmt))
    lines += [data.draw(mutated_line(lines[0])), data.draw(bad_line(fmt))]
    redact, workdir = data.draw(st.booleans()), tmp_path_factory.mktemp("rerun")
    first = ingest(fmt, lines, redact=redact, workdir=workdir)
    assert first.outputs == ingest(fmt, lines, redact=redact, workdir=workdir).outputs


@given(fmt=formats, data=st.data())
@examples(8)
def test_the_command_reports_bad_lines_without_a_traceback(fmt, data, tmp_path_factory):
    from typer.testing import CliRunner

    import stateset_agents.cli.ingest_cmd  # noqa: F401  (attaches the command)
    from stateset_agents.cli.app import app

    lines = data.draw(real_lines(fmt))
    lines = [data.draw(mutated_line(line)) for line in lines] + [data.draw(bad_line(fmt))]
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "log.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    result = CliRunner().invoke(app, ["ingest", "-f", fmt, "-i", str(tmp / "log.jsonl"), "-o", str(tmp / "out")])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 1) and "Traceback" not in result.output
    assert "rejected" in result.output
