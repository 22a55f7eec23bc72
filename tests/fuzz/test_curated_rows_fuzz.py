"""Property tests of the curated-row reader (kernel/stateset_agents/pipeline/curated_rows.py): a transcript line as
`improve run` reads it (real ones, mutated) is refused with an InputError naming the file and line, or becomes rows
that are JSON, byte-identical to serialising the row built the plain way, with one message schema."""
from __future__ import annotations

from concurrent.futures import Future

import orjson
from hypothesis import given
from hypothesis import strategies as st

from stateset_agents.core.errors import InputError
from stateset_agents.pipeline.curated_rows import Conversation, normalise_message
from stateset_agents.pipeline.grading import check_conversation, role_and_group
from tests.helpers.fuzzing import examples

from .corpus import mutated, seed_records

SHA = Future()
SHA.set_result("0" * 64)
SOURCE = ("transcripts.jsonl", SHA)
MESSAGE_SCHEMA = {"role": str, "content": str, "tool_calls": (list, type(None)), "tool_call_id": (str, type(None)),
                  "name": (str, type(None))}

transcripts = seed_records.flatmap(lambda r: st.one_of(st.just(r), mutated(r), mutated(r).flatmap(mutated)))


def expected_row(data: dict, line: int, turn: int, score: float) -> dict:
    """The curated row as the docstring of `Conversation.curated_line` describes it, built as plain dicts."""
    messages = [normalise_message(m) for m in data["messages"]]
    src = data.get("source") or {}
    src_line = src.get("line")
    lineage = {"conversation_id": data["id"], "source_path": str(src.get("path") or SOURCE[0]),
               "source_sha256": str(src.get("sha256") or SHA.result()),
               "line": src_line if isinstance(src_line, int) and not isinstance(src_line, bool) else line,
               "turn_index": turn}
    return {"prompt": messages[:turn], "completion": [messages[turn]], "continuation": messages[turn + 1:],
            "tools": orjson.dumps(data.get("tools") or []).decode(), "score": score,
            "metadata": orjson.dumps(data.get("metadata") or {}).decode(), "lineage": lineage, "split": "train"}


@given(record=transcripts, line=st.integers(1, 10 ** 6), score=st.floats(0, 1), fraction=st.sampled_from((0, 0.3)))
@examples(150)
def test_a_transcript_becomes_exact_rows_or_a_located_error(record, line, score, fraction):
    raw = orjson.dumps(record) if _writable(record) else None
    try:
        data, turns, _ = check_conversation(record, "transcripts.jsonl", line)
        role, group = role_and_group(data, fraction)
        conv = Conversation(data, line, turns, role, group)
        rows = [(turn, *conv.curated_line(turn, score, SOURCE)) for turn in turns]
        held_out = [orjson.loads(conv.held_out_line(turn, SOURCE)) for turn in turns]
    except InputError as exc:
        assert (exc.path, exc.line) == ("transcripts.jsonl", line), exc
        return
    for turn, row_bytes, bits in rows:
        expected = expected_row(data, line, turn, score)
        assert row_bytes == orjson.dumps(expected, option=orjson.OPT_APPEND_NEWLINE)
        for message in (*expected["prompt"], *expected["completion"], *expected["continuation"]):
            assert list(message) == list(MESSAGE_SCHEMA)
            assert all(isinstance(message[k], kind) for k, kind in MESSAGE_SCHEMA.items()), message
        assert bits >> 3 & 1 == (expected["completion"][0]["tool_calls"] is not None)
    for turn, prompt in zip(turns, held_out):
        assert prompt["id"] == f"{data['id']}#{turn}" and prompt["split"] == role
        assert prompt["prompt"] == [normalise_message(m) for m in data["messages"][:turn]]
    if raw is not None:  # building the rows changed nothing of the conversation but making its id a string
        assert orjson.dumps(record) == orjson.dumps({**orjson.loads(raw), "id": data["id"]})


def _writable(value) -> bool:
    try:
        orjson.dumps(value)
    except TypeError:
        return False
    return True
