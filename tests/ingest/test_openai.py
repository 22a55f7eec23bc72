"""`ingestor:openai` through `run_ingest`: conversation lines, bare message lists, rejects, call-log stitching."""
from __future__ import annotations

from pathlib import Path

import pytest

from stateset_agents.pipeline.ingest import run_ingest

from .logs import interleave, openai_calls, read_outputs, write_jsonl

WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


def tool_conversation(city: str = "Paris", arguments: str | None = None) -> list[dict]:
    return [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": f"Weather in {city}?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{city}", "type": "function", "function": {
            "name": "get_weather", "arguments": arguments or f'{{"city": "{city}"}}'}}]},
        {"role": "tool", "tool_call_id": f"call_{city}", "name": "get_weather", "content": '{"temp_c": 21}'},
        {"role": "assistant", "content": f"It is 21 C in {city}."},
        {"role": "user", "content": "Thanks! And tomorrow?"},
        {"role": "assistant", "content": "I can only see today."},
    ]


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def ingest(lines, **kwargs):
    write_jsonl(Path("log.jsonl"), lines)
    summary = run_ingest("openai", "log.jsonl", "out", **kwargs)
    transcripts, rejects, written = read_outputs(Path("out"))
    assert written == summary
    return transcripts, rejects, summary


def test_conversation_lines_keep_everything(here):
    messages = tool_conversation()
    messages[1]["content"] = [{"type": "text", "text": "Weather in Paris?"},
                              {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    messages.insert(1, {"role": "developer", "content": "Be brief."})
    record = {"id": "conv-7", "messages": messages, "tools": [WEATHER_TOOL],
              "metadata": {"expected_tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
              "model": "gpt-4o"}
    transcripts, rejects, summary = ingest([record])
    assert rejects == [] and summary["written"] == 1
    (conv,) = transcripts
    assert conv["id"] == "conv-7"
    assert conv["messages"] == messages  # same keys and values; content parts, tool calls, tool results kept
    assert conv["tools"] == [WEATHER_TOOL]
    # The log's metadata, plus its other top-level keys.
    assert conv["metadata"] == {**record["metadata"], "model": "gpt-4o"}
    assert conv["source"]["path"] == "log.jsonl" and conv["source"]["line"] == 1
    assert len(conv["source"]["sha256"]) == 64


def test_bare_message_list_gets_a_deterministic_id(here):
    transcripts, _, _ = ingest([tool_conversation("Rome")])
    first = transcripts[0]["id"]
    assert first.startswith("conv-")
    transcripts, _, _ = ingest([tool_conversation("Rome")])
    assert transcripts[0]["id"] == first
    transcripts, _, _ = ingest([tool_conversation("Oslo")])
    assert transcripts[0]["id"] != first


def test_tool_arguments_are_kept_exactly_even_when_not_json(here):
    odd = '{"city": "Paris", '  # truncated by the model: still what it said
    spaced = '{ "city" :  "Lyon" }'
    transcripts, rejects, _ = ingest([{"messages": tool_conversation("Paris", odd)},
                                      {"messages": tool_conversation("Lyon", spaced)}])
    assert rejects == []
    assert transcripts[0]["messages"][2]["tool_calls"][0]["function"]["arguments"] == odd
    assert transcripts[1]["messages"][2]["tool_calls"][0]["function"]["arguments"] == spaced


BAD_LINES = [
    ("{not json", "invalid_json", None),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "unknown_role", "messages[0].role"),
    ({"messages": [{"role": "user", "content": "hi"},
                   {"role": "tool", "tool_call_id": "call_nowhere", "content": "{}"}]},
     "orphan_tool_result", "messages[1].tool_call_id"),
    ({"messages": "hello"}, "wrong_type", "messages"),
    ({"messages": [{"role": "user", "content": 42}]}, "wrong_type", "messages[0].content"),
    ({"messages": []}, "no_messages", "messages"),
    ([], "no_messages", None),
    ({"messages": [{"content": "who am I"}]}, "missing_field", "messages[0].role"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": 3}}]}]},
     "wrong_type", "messages[1].tool_calls[0].function.arguments"),
    ({"prompt": "hi", "completion": "hello"}, "unknown_format", None),
    ('"just a string"', "wrong_type", None),
    ({"request": {"messages": [{"role": "user", "content": "hi"}]}, "response": {"error": {"message": "rate limited"}}},
     "error_response", "response.error"),
    ({"request": {"messages": [{"role": "user", "content": "hi"}]}}, "missing_field", "response"),
]


def test_each_bad_line_is_rejected_with_its_line_and_reason_and_the_rest_go_on(here):
    good = {"id": "good", "messages": tool_conversation()}
    lines = []
    for bad, _, _ in BAD_LINES:
        lines += [bad, {**good, "id": f"good-{len(lines)}", "metadata": {"n": len(lines)}}]
    transcripts, rejects, summary = ingest(lines)
    assert [(r["line"], r["reason"], r["field"]) for r in rejects] == [
        (2 * i + 1, reason, field) for i, (_, reason, field) in enumerate(BAD_LINES)]
    assert all(r["path"] == "log.jsonl" and r["detail"] for r in rejects)
    assert len(transcripts) == len(BAD_LINES)  # every good line after a bad one still made it
    assert summary["rejected"] == len(BAD_LINES) and summary["read"] == len(lines)
    assert sum(summary["rejected_by_reason"].values()) == len(BAD_LINES)
    assert summary["rejected_by_reason"]["wrong_type"] == 4


def test_call_logs_are_stitched_by_message_prefix_even_interleaved(here):
    paris, rome = tool_conversation("Paris"), tool_conversation("Rome")
    lines = interleave(openai_calls(paris, [WEATHER_TOOL]), openai_calls(rome, [WEATHER_TOOL]))
    transcripts, rejects, summary = ingest(lines)
    assert rejects == [] and len(transcripts) == 2
    by_city = {t["messages"][1]["content"]: t for t in transcripts}
    for city, want, lines_ in (("Paris", paris, [1, 3, 5]), ("Rome", rome, [2, 4, 6])):
        conv = by_city[f"Weather in {city}?"]
        got = [{k: v for k, v in m.items() if k not in ("refusal", "annotations")} for m in conv["messages"]]
        assert got == want
        assert conv["source"]["lines"] == lines_ and conv["source"]["line"] == lines_[-1]
        assert conv["source"]["unstitched"] is False
        assert conv["tools"] == [WEATHER_TOOL]
        assert [c["response"]["id"] for c in conv["metadata"]["call_log"]] == ["chatcmpl-0", "chatcmpl-1",
                                                                                 "chatcmpl-2"]
    assert summary["call_logs"] == {"calls": 6, "conversations": 2, "unstitched": 0}


def test_identical_openings_of_different_conversations_are_stitched_apart(here):
    # Both conversations start the same way; they part at the user's second turn.
    base = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]
    a = base + [{"role": "user", "content": "book"}, {"role": "assistant", "content": "Booked."}]
    b = base + [{"role": "user", "content": "cancel"}, {"role": "assistant", "content": "Cancelled."}]
    transcripts, _, summary = ingest(interleave(openai_calls(a), openai_calls(b)))
    got = sorted([m["content"] for m in t["messages"]] for t in transcripts)
    assert got == [["hi", "Hello!", "book", "Booked."], ["hi", "Hello!", "cancel", "Cancelled."]]
    assert summary["call_logs"]["unstitched"] == 0


def test_call_logs_are_stitched_by_conversation_id_and_conflicts_reported(here):
    paris, rome = tool_conversation("Paris"), tool_conversation("Rome")
    calls_p = openai_calls(paris, conversation_id="sess-p")
    calls_r = [{**c, "metadata": {"conversation_id": "sess-r", "user": "u1"}} for c in openai_calls(rome)]
    # A call under sess-p whose history does not match what sess-p said so far.
    stray = openai_calls(tool_conversation("Oslo"), conversation_id="sess-p")[1]
    lines = interleave(calls_p, calls_r) + [stray]
    transcripts, rejects, summary = ingest(lines)
    assert sorted(t["id"] for t in transcripts) == ["sess-p", "sess-r"]
    conv_r = next(t for t in transcripts if t["id"] == "sess-r")
    assert conv_r["metadata"]["user"] == "u1" and conv_r["source"]["lines"] == [2, 4, 6]
    assert [(r["line"], r["reason"]) for r in rejects] == [(7, "stitch_conflict")]
    assert "sess-p" in rejects[0]["detail"]
    assert summary["read"] == 7


def test_stitching_state_is_bounded_by_the_window(here):
    """A conversation not extended within `stitch_window` lines is finished; a late call starts a new one, flagged
    unstitched, and loses nothing (its request carries the history)."""
    convo = tool_conversation("Paris")
    first, second, third = openai_calls(convo)
    filler = [{"id": f"f{i}", "messages": [{"role": "user", "content": f"filler {i}"}]} for i in range(5)]
    transcripts, rejects, summary = ingest([first, second, *filler, third], config={"stitch_window": 3})
    stitched = [t for t in transcripts if "lines" in t["source"]]
    assert [t["source"]["lines"] for t in stitched] == [[1, 2], [8]]
    assert [t["source"]["unstitched"] for t in stitched] == [False, True]
    assert len(stitched[1]["messages"]) == len(convo)
    assert summary["call_logs"] == {"calls": 3, "conversations": 2, "unstitched": 1}
    # With the default window the three calls make one conversation.
    transcripts, _, _ = ingest([first, second, *filler, third])
    assert [t["source"]["lines"] for t in transcripts if "lines" in t["source"]] == [[1, 2, 8]]
