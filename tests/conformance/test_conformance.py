"""The contract, checked for every registered component in every runtime this machine has.

New components (first-party, third-party, test-only) are picked up automatically from the registry. Each kind has
the checks its contract implies; a component must give the same answers whichever runtime serves it.
"""
from __future__ import annotations

import pytest

from stateset_agents import GradeItem, Reject, Source
from stateset_agents.components import assistant_turns
from stateset_agents.errors import ComponentUnavailable, PluginError, StatesetError
from stateset_agents.jsonio import sha256_file
from stateset_agents.registry import get_registry
from stateset_agents.runtimes import available_runtimes, load_spec

SPECS = get_registry(refresh=True).all()
# Every runtime this machine has for the component (container: a Docker daemon and a built image holding it).
CASES = [(spec, runtime) for spec in SPECS for runtime in available_runtimes(spec)]


def _id(case):
    spec, runtime = case
    return f"{spec.full_name}@{runtime}"


@pytest.fixture(params=CASES, ids=[_id(c) for c in CASES])
def case(request):
    return request.param


def _load(spec, runtime):
    cls = spec.load_class()
    return load_spec(spec, config=cls.example_config(), runtime=runtime)


SAMPLE_CONVERSATIONS = [
    {"id": "support-1", "source": {"path": "sample.jsonl", "sha256": "0" * 64, "line": 1},
     "messages": [
         {"role": "system", "content": "You are a helpful support agent."},
         {"role": "user", "content": "Where is my order 1234? Please check."},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "call_1", "type": "function",
              "function": {"name": "get_order", "arguments": "{\"order_id\": \"1234\"}"}}]},
         {"role": "tool", "tool_call_id": "call_1", "name": "get_order", "content": "{\"status\": \"shipped\"}"},
         {"role": "assistant", "content": "Your order 1234 has shipped and should arrive in two days."},
         {"role": "user", "content": "I want to talk to a human now."},
         {"role": "assistant", "content": "Of course, I am transferring you to a human agent."}],
     "tools": [{"type": "function", "function": {"name": "get_order", "description": "Look up an order.",
                                                 "parameters": {"type": "object",
                                                                "properties": {"order_id": {"type": "string"}},
                                                                "required": ["order_id"]}}}],
     "metadata": {"reference_answer": "1234", "expected_tool_calls": [
         {"name": "get_order", "arguments": {"order_id": "1234"}}]}},
    {"id": "math-1", "messages": [
        {"role": "user", "content": "What is 6 times 7?"},
        {"role": "assistant", "content": "6 x 7 = 42. The answer is 42."}],
     "tools": [], "metadata": {"reference_answer": "42"}},
]


def test_metadata_matches_the_registration(case):
    spec, runtime = case
    if not spec.available:
        with pytest.raises(ComponentUnavailable, match="install|pip"):
            _load(spec, runtime)
        return
    with _load(spec, runtime) as comp:
        assert (comp.kind, comp.name, comp.version) == (spec.kind, spec.name, spec.version)
        if runtime != "inprocess":
            assert 1 in comp.contract_versions


def _reward_rows(spec, runtime, items):
    with _load(spec, runtime) as reward:
        try:
            first = reward.grade(items)
        except PluginError as exc:  # a remote reward must fail exactly where the local one does
            raise AssertionError(f"unexpected plugin error: {exc}") from None
        second = list(reward.grade_many([items[:1], items[1:]]))
    return first, [row for batch in second for row in batch]


@pytest.mark.parametrize("spec", [s for s in SPECS if s.kind == "reward" and s.available and
                                  s.name != "test_faulty"], ids=lambda s: s.full_name)
def test_reward_contract(spec):
    items = [GradeItem(c) for c in SAMPLE_CONVERSATIONS]
    results = {runtime: _reward_rows(spec, runtime, items) for runtime in available_runtimes(spec)}
    rows, batched = results["inprocess"]
    expected_turns = [(c["id"], t) for c in SAMPLE_CONVERSATIONS for t in assistant_turns(c)]
    assert [(r["conversation_id"], r["turn_index"]) for r in rows] == expected_turns
    for row in rows:
        assert set(row) == {"conversation_id", "turn_index", "score", "applicable", "breakdown", "reason", "reward"}
        assert isinstance(row["score"], float) and 0.0 <= row["score"] <= 1.0
        assert isinstance(row["applicable"], bool) and isinstance(row["breakdown"], dict)
        assert isinstance(row["reason"], str) and "\n" not in row["reason"]
        assert row["reward"]["name"] == spec.name and row["reward"]["version"] == spec.version
        assert len(row["reward"]["config_sha256"]) == 64
    assert batched == rows, "grade_many must give the same rows as grade"
    for runtime, (other, other_batched) in results.items():
        assert other == rows, f"{runtime} grades differ from in-process"
        assert other_batched == rows
    # Turn selection: only the requested turn is graded.
    last = expected_turns[-1]
    with _load(spec, "inprocess") as reward:
        only = reward.grade([GradeItem(SAMPLE_CONVERSATIONS[-1], turns=[last[1]])])
    assert [(r["conversation_id"], r["turn_index"]) for r in only] == [last]
    # A turn that is not an assistant message is refused, not graded.
    with _load(spec, "inprocess") as reward, pytest.raises(StatesetError):
        reward.grade([GradeItem(SAMPLE_CONVERSATIONS[-1], turns=[0])])


@pytest.mark.parametrize("spec", [s for s in SPECS if s.kind == "ingestor" and s.available],
                         ids=lambda s: s.full_name)
def test_ingestor_contract(spec, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{not json\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    for runtime in available_runtimes(spec):
        with _load(spec, runtime) as ingestor:
            out = list(ingestor.ingest(Source(path="bad.jsonl", sha256=sha256_file(bad), local_path=str(bad))))
            assert len(out) == 1 and isinstance(out[0], Reject), out
            assert (out[0].path, out[0].line) == ("bad.jsonl", 1)
            assert list(ingestor.ingest(Source(path="empty.jsonl", sha256=sha256_file(empty),
                                               local_path=str(empty)))) == []


@pytest.mark.parametrize("spec", [s for s in SPECS if s.kind in ("trainer", "evaluator") and s.available],
                         ids=lambda s: s.full_name)
def test_long_work_fails_closed_on_an_empty_request(spec, tmp_path):
    """An incomplete request must end in `failed` or a clear error, never in `completed`."""
    for runtime in available_runtimes(spec):
        with _load(spec, runtime) as comp:
            try:
                events = list(comp.run({"output_dir": str(tmp_path / runtime)}))
            except StatesetError:
                continue
            assert events, "a stream must end with completed or failed"
            assert events[-1]["type"] == "failed", events[-1]
            assert all(e["type"] != "completed" for e in events)


@pytest.mark.parametrize("spec", [s for s in SPECS if s.kind == "reward" and s.available and
                                  s.name != "test_faulty"], ids=lambda s: s.full_name)
def test_screening_answers_what_grading_would(spec):
    """`Reward.screen` may only say "nothing here is applicable" where grading says so too, for the same reason;
    and a batch graded with screening, in any runtime, writes the bytes in-process grading writes."""
    import orjson

    from stateset_agents.jsonio import dumps_line

    bare = [{**c, "id": f"{c['id']}-bare", "metadata": {}, "tools": []} for c in SAMPLE_CONVERSATIONS]
    conversations = SAMPLE_CONVERSATIONS + bare
    items = [GradeItem(c, raw_json=orjson.dumps(c), assistant_turns=assistant_turns(c)) for c in conversations]
    with _load(spec, "inprocess") as reward:
        rows = reward.grade(items)
        for item in items:
            reason = reward.screen(item.raw_json)
            if reason is not None:
                graded = [r for r in rows if r["conversation_id"] == item.conversation["id"]]
                assert all(not r["applicable"] and r["reason"] == reason and r["breakdown"] == {} for r in graded)
    for runtime in available_runtimes(spec):
        with _load(spec, runtime) as reward:
            batches = list(reward.grade_many([items[:2], items[2:]], screened=True))
        assert b"".join(getattr(b, "jsonl", None) or b"".join(map(dumps_line, b)) for b in batches) == \
            b"".join(map(dumps_line, rows)), runtime
