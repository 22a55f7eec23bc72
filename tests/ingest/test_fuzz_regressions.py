"""Defects the fuzzing of issue 24 found in ingest and the curated-row reader, each pinned by the input that showed it.

* A line nested deeper than orjson writes (255 to 1024 levels: it reads up to 1024) crashed the whole run with
  `TypeError: Recursion limit reached` (the kernel's digest, the stitcher's, an Anthropic tool input): now the line is
  rejected as `too_deep` and the rest are ingested, in every runtime.
* A stitched conversation rejected as `duplicate_id` left all but its last line unaccounted for: now each line has
  its reject.
* A transcript nested too deep for the curated rows crashed `improve run` with a TypeError: now an InputError naming
  the file and line.
"""
from __future__ import annotations

import json
from concurrent.futures import Future

import pytest

from stateset_agents.core.components import Source
from stateset_agents.core.errors import InputError, PluginError
from stateset_agents.pipeline.curated_rows import Conversation
from stateset_agents.pipeline.grading import check_conversation
from stateset_agents.pipeline.ingest import _Ingest, _Output, _Tally, run_ingest

from .logs import openai_calls, read_outputs, write_jsonl
from .test_openai import tool_conversation


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


GOOD = {"id": "good", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
ALSO_GOOD = {"id": "also-good", "messages": [{"role": "user", "content": "hey"}]}


@pytest.mark.parametrize("levels", [253, 600, 1020])
@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_a_line_nested_too_deep_is_rejected_and_its_neighbours_ingested(tmp_path, fmt, levels):
    deep_metadata = '{"messages": [{"role": "user", "content": "q"}], "metadata": {"x": %s}}' % nested(levels)
    write_jsonl(tmp_path / "log.jsonl", [GOOD, deep_metadata, ALSO_GOOD])
    summary = run_ingest(fmt, tmp_path / "log.jsonl", tmp_path / "out")
    transcripts, rejects, _ = read_outputs(tmp_path / "out")
    assert [t["id"] for t in transcripts] == ["good", "also-good"]
    assert [(r["line"], r["reason"]) for r in rejects] == [(2, "too_deep")]
    assert (summary["read"], summary["written"], summary["rejected"]) == (3, 2, 1)


def test_an_anthropic_tool_input_too_deep_to_write_as_arguments_is_rejected(tmp_path):
    call = ('{"request": {"messages": [{"role": "user", "content": "q"}]}, "response": {"content": '
            '[{"type": "tool_use", "id": "t1", "name": "lookup", "input": {"a": %s}}]}}' % nested(300))
    write_jsonl(tmp_path / "log.jsonl", [call, GOOD])
    run_ingest("anthropic", tmp_path / "log.jsonl", tmp_path / "out")
    transcripts, rejects, _ = read_outputs(tmp_path / "out")
    assert [t["id"] for t in transcripts] == ["good"]
    assert [(r["line"], r["reason"]) for r in rejects] == [(1, "too_deep")]


def test_a_call_too_deep_to_digest_leaves_its_conversation_stitching_on(tmp_path):
    messages = tool_conversation()
    calls = openai_calls(messages, conversation_id="c1")
    broken = json.loads(json.dumps(calls[1]))
    # An image part nested too deep: the stitcher digests content parts, so the plugin meets it first.
    broken["request"]["messages"][0]["content"] = [{"type": "image", "data": json.loads(nested(400))}]
    write_jsonl(tmp_path / "log.jsonl", [calls[0], broken, *calls[1:]])
    summary = run_ingest("openai", tmp_path / "log.jsonl", tmp_path / "out")
    transcripts, rejects, _ = read_outputs(tmp_path / "out")
    assert [(r["line"], r["reason"]) for r in rejects] == [(2, "too_deep")]
    assert len(transcripts) == 1 and transcripts[0]["source"]["lines"] == [1, *range(3, len(calls) + 2)]
    assert summary["read"] == len(calls) + 1


def test_the_subprocess_runtime_rejects_the_same_lines(tmp_path):
    deep_metadata = '{"messages": [{"role": "user", "content": "q"}], "metadata": {"x": %s}}' % nested(300)
    write_jsonl(tmp_path / "log.jsonl", [GOOD, deep_metadata])
    run_ingest("openai", tmp_path / "log.jsonl", tmp_path / "in", runtime="inprocess")
    run_ingest("openai", tmp_path / "log.jsonl", tmp_path / "sub", runtime="subprocess")
    for name in ("transcripts.jsonl", "rejects.jsonl"):
        assert (tmp_path / "in" / name).read_bytes() == (tmp_path / "sub" / name).read_bytes()


def test_a_stitched_conversation_with_a_used_id_has_a_reject_for_each_of_its_lines(tmp_path):
    calls = openai_calls(tool_conversation(), conversation_id="taken")
    write_jsonl(tmp_path / "log.jsonl", [{**GOOD, "id": "taken"}, *calls])
    summary = run_ingest("openai", tmp_path / "log.jsonl", tmp_path / "out")
    transcripts, rejects, _ = read_outputs(tmp_path / "out")
    assert [t["id"] for t in transcripts] == ["taken"]
    assert [(r["line"], r["reason"]) for r in rejects] == [(n, "duplicate_id") for n in range(2, len(calls) + 2)]
    assert summary["read"] == 1 + len(calls) == summary["written"] + summary["rejected"]


def test_a_plugin_yielding_a_conversation_that_is_not_json_is_a_plugin_error(tmp_path):
    import io

    run = _Ingest(_Output(io.BytesIO(), "t"), _Output(io.BytesIO(), "r"), redact=False)
    source = Source(path="log.jsonl", sha256="0" * 64, local_path=str(tmp_path / "log.jsonl"))
    conv = {"messages": [{"role": "user", "content": "hi"}], "metadata": {"tags": {"a", "b"}}}
    with pytest.raises(PluginError, match="not JSON"):
        run.conversation(conv, source, _Tally(), "ingestor:broken")


@pytest.mark.parametrize("where", ["metadata", "arguments", "tools"])
def test_a_transcript_too_deep_for_the_rows_is_an_error_naming_its_line(where):
    deep = json.loads(nested(300))
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": deep if where == "arguments"
                                                        else "{}"}}
    data = {"id": "t1", "messages": [{"role": "user", "content": "q"},
                                     {"role": "assistant", "content": None, "tool_calls": [call]}],
            "tools": [deep] if where == "tools" else [], "metadata": {"x": deep} if where == "metadata" else {}}
    data, turns, _ = check_conversation(data, "transcripts.jsonl", 7)
    sha = Future()
    sha.set_result("0" * 64)
    with pytest.raises(InputError) as caught:
        Conversation(data, 7, turns).curated_line(turns[0], 1.0, ("transcripts.jsonl", sha))
    assert (caught.value.path, caught.value.line) == ("transcripts.jsonl", 7)
    assert "nests too deeply" in str(caught.value)
