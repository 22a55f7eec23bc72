"""The 100 tau-airline trajectories (real agent logs, ../shared/data): ingested with every tool call intact, and
rebuilt from OpenAI and Anthropic call logs made of them. Fails, never skips, when the data is missing."""
from __future__ import annotations

import json

import pytest

from tests.helpers.realdata import tau_log_records
from stateset_agents.pipeline.ingest import run_ingest

from .logs import (
    anthropic_calls,
    assistant_indices,
    essence,
    interleave,
    openai_calls,
    read_outputs,
    write_jsonl,
)


@pytest.fixture(scope="module")
def records() -> list[dict]:
    records = tau_log_records(with_expected_calls=True)
    assert len(records) == 100
    return records


def tool_calls(conversation: dict) -> list[tuple]:
    return [(c["id"], c["function"]["name"], c["function"]["arguments"])
            for m in conversation["messages"] for c in m.get("tool_calls") or ()]


def tool_results(conversation: dict) -> list[tuple]:
    return [(m["tool_call_id"], m.get("name"), m["content"]) for m in conversation["messages"] if m["role"] == "tool"]


def until_last_reply(messages: list[dict]) -> list[dict]:
    """What a call log can hold: turns after the last model call were never sent to the model."""
    return messages[:assistant_indices(messages)[-1] + 1]


def test_every_trajectory_ingests_with_its_tool_calls_intact(tmp_path, records):
    write_jsonl(tmp_path / "tau.jsonl", records)
    summary = run_ingest("openai", tmp_path / "tau.jsonl", tmp_path / "out")
    transcripts, rejects, _ = read_outputs(tmp_path / "out")
    assert rejects == [] and summary["written"] == 100 == len(transcripts)
    assert sum(len(tool_calls(r)) for r in records) > 500
    for record, conv in zip(records, transcripts):
        assert conv["id"] == record["id"]
        assert tool_calls(conv) == tool_calls(record)  # same ids, names, argument strings
        assert tool_results(conv) == tool_results(record)
        assert conv["messages"] == record["messages"] and conv["tools"] == record["tools"]
        assert conv["metadata"] == record["metadata"]


def test_openai_call_logs_stitch_back_into_the_trajectories(tmp_path, records):
    sample = records[:30]
    streams = [openai_calls(r["messages"], r["tools"]) for r in sample]
    write_jsonl(tmp_path / "calls.jsonl", interleave(*streams))  # concurrent conversations, one log
    summary = run_ingest("openai", tmp_path / "calls.jsonl", tmp_path / "out")
    transcripts, rejects, _ = read_outputs(tmp_path / "out")
    assert rejects == [] and len(transcripts) == 30
    assert summary["call_logs"] == {"calls": sum(map(len, streams)), "conversations": 30, "unstitched": 0}
    reply_extras = ("refusal", "annotations")  # on the logged reply, not echoed in the next request
    got = sorted(json.dumps([{k: v for k, v in m.items() if k not in reply_extras} for m in t["messages"]],
                            sort_keys=True)
                 for t in transcripts)
    assert got == sorted(json.dumps(until_last_reply(r["messages"]), sort_keys=True) for r in sample)
    assert all(t["tools"] == sample[0]["tools"] for t in transcripts)


def test_openai_call_logs_with_conversation_ids(tmp_path, records):
    sample = records[30:50]
    streams = [openai_calls(r["messages"], r["tools"], conversation_id=r["id"]) for r in sample]
    write_jsonl(tmp_path / "calls.jsonl", interleave(*streams))
    run_ingest("openai", tmp_path / "calls.jsonl", tmp_path / "out")
    transcripts, rejects, _ = read_outputs(tmp_path / "out")
    assert rejects == []
    by_id = {t["id"]: t for t in transcripts}
    assert sorted(by_id) == sorted(r["id"] for r in sample)
    for record in sample:
        assert tool_calls(by_id[record["id"]]) == tool_calls({"messages": until_last_reply(record["messages"])})


def test_anthropic_call_logs_stitch_back_into_the_trajectories(tmp_path, records):
    sample = records[50:80]
    write_jsonl(tmp_path / "claude.jsonl.gz", interleave(*(anthropic_calls(r["messages"], r["tools"])
                                                           for r in sample)), gz=True)
    run_ingest("anthropic", tmp_path / "claude.jsonl.gz", tmp_path / "out")
    transcripts, rejects, _ = read_outputs(tmp_path / "out")
    assert rejects == [] and len(transcripts) == 30
    assert {essence(t["messages"]) for t in transcripts} == {essence(until_last_reply(r["messages"]))
                                                              for r in sample}
    want_tools = sample[0]["tools"]  # every trajectory declares the same airline tools
    for conv in transcripts:
        assert [t["function"]["name"] for t in conv["tools"]] == [t["function"]["name"] for t in want_tools]
        assert [t["function"]["parameters"] for t in conv["tools"]] == [t["function"]["parameters"]
                                                                        for t in want_tools]


def test_redacting_the_trajectories_finds_their_emails_and_nothing_else(tmp_path, records):
    write_jsonl(tmp_path / "tau.jsonl", records)
    summary = run_ingest("openai", tmp_path / "tau.jsonl", tmp_path / "out", redact=True)
    transcripts, _, _ = read_outputs(tmp_path / "out")
    assert summary["redactions"]["EMAIL"] > 0
    assert sum(summary["redactions"].values()) == summary["redactions"]["EMAIL"]
    text = (tmp_path / "out" / "transcripts.jsonl").read_text()
    assert "@example.com" not in text
    for record, conv in zip(records, transcripts):
        # Tool calls keep their ids, names and parseable arguments; reservation and payment ids survive.
        assert [c[:2] for c in tool_calls(conv)] == [c[:2] for c in tool_calls(record)]
        for _, _, arguments in tool_calls(conv):
            json.loads(arguments)
    assert "credit_card_" in text and "HAT" in text
