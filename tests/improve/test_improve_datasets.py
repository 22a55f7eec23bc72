"""curated.jsonl loads with `datasets` as it is (one Arrow type per field, whatever the logs held), on the real
tau-bench airline logs and on logs built to trip Arrow's schema inference."""
from __future__ import annotations

import json

import datasets
import pytest

from stateset_agents.cli import main
from tests.helpers.realdata import tau_log_records
from tests.improve.improve_helpers import chat, write_transcripts

datasets.disable_progress_bars()


def load(path, cache, **kwargs):
    return datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(cache), **kwargs)


def improve(tmp_path, convs):
    write_transcripts(tmp_path / "in", convs)
    assert main(["improve", "run", "--transcripts", str(tmp_path / "in"), "--reward", "improve_toy",
                 "--output", str(tmp_path / "out"), "--held-out", "0"]) == 0
    return tmp_path / "out" / "curated.jsonl"


def is_message_list(value) -> bool:
    return isinstance(value, list) and value and all(
        isinstance(m, dict) and isinstance(m["role"], str) and isinstance(m["content"], str) for m in value)


@pytest.mark.parametrize("chunksize", [None, 64 << 10])  # one chunk, and many (schema inferred from the first)
def test_tau_airline_curated_output_loads(tmp_path, chunksize):
    curated = improve(tmp_path, tau_log_records())
    expected = sum(1 for _ in open(curated))
    ds = load(curated, tmp_path / "cache", **({"chunksize": chunksize} if chunksize else {}))
    assert len(ds) == expected > 100
    assert ds.column_names == ["prompt", "completion", "continuation", "tools", "score", "metadata", "lineage",
                               "split"]
    calls = 0
    for row in ds:
        assert is_message_list(row["prompt"]) and is_message_list(row["completion"])
        assert len(row["completion"]) == 1 and row["completion"][0]["role"] == "assistant"
        for call in row["completion"][0]["tool_calls"] or []:
            assert isinstance(call["function"]["arguments"], str)
            calls += 1
        assert isinstance(json.loads(row["tools"]), list)
        assert "expected_tool_calls" in json.loads(row["metadata"])
    assert calls > 0


def test_late_tool_calls_and_mixed_metadata_still_load(tmp_path):
    # Past the first MiB, where a type first seen moves to the head of the file.
    convs = [chat(f"plain-{i}", f"hello {i} " + "x" * 4000, "GOOD", metadata={"label": i % 2 == 0})
             for i in range(300)]
    call = {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": {"q": 1}}}
    convs.append({"id": "late", "messages": [
        {"role": "user", "content": "look it up"}, {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "name": "lookup", "content": "found"},
        {"role": "assistant", "content": "GOOD, found it"}],
        "metadata": {"label": 0.5, "nested": {"a": [1, "b", None]}}})
    curated = improve(tmp_path, convs)
    with open(curated, "rb") as f:  # the rows that bring the late types lead the file
        assert [json.loads(f.readline())["lineage"]["conversation_id"] for _ in range(2)] == ["late", "late"]
    ds = load(curated, tmp_path / "cache", chunksize=16 << 10)
    assert len(ds) == 302
    late = [row for row in ds if row["lineage"]["conversation_id"] == "late"]
    assert [r["completion"][0]["tool_calls"][0]["function"]["arguments"] if r["completion"][0]["tool_calls"]
            else None for r in late] == ['{"q":1}', None]
    assert json.loads(late[0]["metadata"])["nested"] == {"a": [1, "b", None]}
    assert late[1]["prompt"][2]["tool_call_id"] == "c"
