"""`ingestor:anthropic`: Messages API logs become OpenAI-shaped transcripts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stateset_agents.pipeline.ingest import run_ingest

from .logs import anthropic_calls, essence, interleave, read_outputs, write_jsonl
from .test_openai import WEATHER_TOOL, tool_conversation


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def ingest(lines, **kwargs):
    write_jsonl(Path("log.jsonl"), lines)
    run_ingest("anthropic", "log.jsonl", "out", **kwargs)
    return read_outputs(Path("out"))


CALL = {
    "request": {
        "model": "claude-test", "max_tokens": 512,
        "system": [{"type": "text", "text": "You are a travel agent."}],
        "tools": [
            {"name": "get_weather", "description": "Weather now",
             "input_schema": WEATHER_TOOL["function"]["parameters"], "cache_control": {"type": "ephemeral"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
        ],
        "messages": [
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "tu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "tu_2", "name": "get_weather", "input": {"city": "Rome", "unit": "C"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "tu_1", "content": "21 C"},
                {"type": "tool_result", "tool_use_id": "tu_2", "is_error": True,
                 "content": [{"type": "text", "text": "service down"}]},
                {"type": "text", "text": "Any luck?"},
            ]},
        ],
    },
    "response": {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
                 "content": [{"type": "text", "text": "Paris is 21 C; Rome is unavailable."}],
                 "stop_reason": "end_turn", "usage": {"input_tokens": 50, "output_tokens": 9}},
    "metadata": {"ticket": 42},
}


def test_a_call_log_is_normalised_to_openai_shape(here):
    transcripts, rejects, _ = ingest([CALL])
    assert rejects == []
    (conv,) = transcripts
    assert conv["messages"] == [
        {"role": "system", "content": "You are a travel agent."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [
            {"id": "tu_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
            {"id": "tu_2", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Rome","unit":"C"}'}}]},
        {"role": "tool", "content": "21 C", "tool_call_id": "tu_1"},
        {"role": "tool", "content": "service down", "tool_call_id": "tu_2", "is_error": True},
        {"role": "user", "content": "Any luck?"},
        {"role": "assistant", "content": "Paris is 21 C; Rome is unavailable."},
    ]
    assert conv["tools"] == [
        {**WEATHER_TOOL, "function": {"name": "get_weather", "description": "Weather now",
                                      "parameters": WEATHER_TOOL["function"]["parameters"]},
         "cache_control": {"type": "ephemeral"}},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2},
    ]
    assert conv["metadata"]["ticket"] == 42
    (call,) = conv["metadata"]["call_log"]
    assert call["request"] == {"model": "claude-test", "max_tokens": 512}
    assert call["response"]["usage"] == {"input_tokens": 50, "output_tokens": 9}


def test_calls_are_stitched_into_the_conversation(here):
    paris, rome = tool_conversation("Paris"), tool_conversation("Rome")
    lines = interleave(anthropic_calls(paris, [WEATHER_TOOL]), anthropic_calls(rome, [WEATHER_TOOL]))
    transcripts, rejects, summary = ingest(lines)
    assert rejects == [] and len(transcripts) == 2
    assert {essence(t["messages"]) for t in transcripts} == {essence(paris), essence(rome)}
    assert all(t["tools"][0]["function"]["name"] == "get_weather" for t in transcripts)
    assert summary["call_logs"] == {"calls": 6, "conversations": 2, "unstitched": 0}


def test_whole_conversations_in_request_shape(here):
    record = {"id": "a-1", "system": "Be kind.", "messages": [{"role": "user", "content": "hi"},
                                                             {"role": "assistant", "content": "hello"}]}
    transcripts, _, _ = ingest([record])
    assert transcripts[0]["id"] == "a-1"
    assert transcripts[0]["messages"] == [{"role": "system", "content": "Be kind."},
                                          {"role": "user", "content": "hi"},
                                          {"role": "assistant", "content": "hello"}]


@pytest.mark.parametrize("line, reason, field", [
    ({"messages": [{"role": "system", "content": "no"}]}, "unknown_role", "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]}]},
     "wrong_type", "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "nope", "content": "x"}]}]},
     "orphan_tool_result", "messages[0].content[0].tool_use_id"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]},
     "missing_field", "messages[0].content[0].id"),
    ({"request": {"messages": [{"role": "user", "content": "hi"}]},
      "response": {"type": "error", "error": {"type": "overloaded_error"}}}, "error_response", "response.error"),
    ({"request": {"messages": []}, "response": {"content": []}}, "no_messages", "request.messages"),
])
def test_bad_lines_are_rejected(here, line, reason, field):
    transcripts, rejects, _ = ingest([line, {"messages": [{"role": "user", "content": "fine"}]}])
    assert [(r["line"], r["reason"], r["field"]) for r in rejects] == [(1, reason, field)]
    assert len(transcripts) == 1


def test_tool_input_becomes_a_json_string_keeping_non_ascii(here):
    # Anthropic logs `input` as an object; the OpenAI shape wants a JSON string of it, non-ASCII kept.
    line = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "say", "input": {"text": "héllo ✓"}}]}]}
    transcripts, _, _ = ingest([line])
    arguments = transcripts[0]["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"text": "héllo ✓"} and "✓" in arguments
    assert transcripts[0]["messages"][1]["content"] is None
