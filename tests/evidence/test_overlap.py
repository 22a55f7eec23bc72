"""Split isolation: exact and normalised prompt collisions between training rows and held-out cases."""
from __future__ import annotations

import pytest

from stateset_agents.core.errors import InputError
from stateset_agents.plugin_api.overlap import find_overlaps, isolate_cases, isolate_training_rows, normalise_text


def row(text, line, system=None):
    prompt = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    return {"id": f"r{line}", "_line": line, "prompt": prompt,
            "completion": {"role": "assistant", "content": "ok"}}


CASES = [{"id": "h1", "prompt": [{"role": "user", "content": "Where is my order?"}]},
         {"id": "h2", "prompt": "Cancel my subscription, please."},
         {"id": "h3", "prompt": [{"role": "user", "content": "Call the tool."},
                                 {"role": "assistant", "content": None, "tool_calls": [
                                     {"id": "1", "type": "function",
                                      "function": {"name": "f", "arguments": "{\"a\": 1, \"b\": 2}"}}]}]}]


def test_normalisation_folds_case_whitespace_and_punctuation():
    assert normalise_text("  Where IS   my order?! ") == "where is my order"
    assert normalise_text("don't-stop") == normalise_text("Don t stop")


def test_exact_normalised_and_distinct_prompts():
    rows = [row("Where is my order?", 1),                           # exact
            row("where is   MY order", 2, system="Be kind."),      # normalised; system prompt ignored
            row("cancel my subscription please", 3),                # normalised (a plain-text case)
            row("Where is my parcel?", 4)]                           # different
    found = find_overlaps(rows, CASES)
    assert [(o.dataset_line, o.case_id, o.match) for o in found] == [(1, "h1", "exact"), (2, "h1", "normalised"),
                                                                     (3, "h2", "normalised")]


def test_tool_call_arguments_compare_as_json():
    calls = [{"id": "9", "type": "function", "function": {"name": "f", "arguments": "{\"b\":2,\"a\":1}"}}]
    rows = [{"_line": 7, "prompt": [{"role": "user", "content": "Call the tool."},
                                    {"role": "assistant", "content": None, "tool_calls": calls}]}]
    assert [o.case_id for o in find_overlaps(rows, CASES)] == ["h3"]


def test_training_refuses_with_the_list_or_drops_and_records():
    rows = [row("Where is my order?", 1), row("something else", 2)]
    with pytest.raises(InputError) as err:
        isolate_training_rows(rows, CASES, drop=False, dataset_path="curated.jsonl")
    assert "curated.jsonl" in str(err.value) and "line 1" in str(err.value) and "'h1'" in str(err.value)
    assert "--drop-overlap" in str(err.value)
    kept, record = isolate_training_rows(rows, CASES, drop=True, dataset_path="curated.jsonl")
    assert [r["_line"] for r in kept] == [2]
    assert record["policy"] == "drop" and record["dropped_rows"][0]["dataset_line"] == 1
    with pytest.raises(InputError, match="nothing is left"):
        isolate_training_rows(rows[:1], CASES, drop=True)


def test_evaluation_drops_cases_instead():
    kept, record = isolate_cases([row("where is my order", 1)], CASES, drop=True, dataset_path="d.jsonl")
    assert [c["id"] for c in kept] == ["h2", "h3"] and record["dropped_cases"] == ["h1"]
    clean, record = isolate_cases([row("nothing shared", 1)], CASES, drop=False)
    assert len(clean) == 3 and record["collisions"] == []
