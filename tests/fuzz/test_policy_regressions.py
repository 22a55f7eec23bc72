"""Defects the fuzzing of issue 24 found in the nsr policy loader and language, each pinned by its input.

Loading: a policy whose sections had the wrong shape (`words: [..]`, `tools: [..]`, `facts: [..]`, `constants: 5`,
a list as a rule id or a tool name, `weight: abc`, `decision: {refusal: 5}`) raised AttributeError, TypeError or
ValueError; an expression nested past the parser's limit raised RecursionError. Evaluating, on facts from a log:
`-text`, a list as a key, `'x' * huge` and `flatten`/`leaves` of deeply nested arguments raised TypeError,
OverflowError or RecursionError (failing the whole `improve run`), and `'x' * args.n` could allocate gigabytes.
A policy nested past 254 levels (in a key the loader ignores) loaded, then crashed the config digest (TypeError).
"""
from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from stateset_agents.core.errors import InputError
from stateset_plugins.rewards.nsr import NSRReward
from stateset_plugins.rewards.policy_language import UNKNOWN, Evaluator, compile_expression, flatten, leaves
from stateset_plugins.rewards.policy_loading import load_policy

RULE = {"id": "r", "require": "true"}


@pytest.mark.parametrize("policy, field", [
    ({"rules": [RULE], "words": ["refusal"]}, "policy.words"),
    ({"rules": [RULE], "tools": ["issue_refund"]}, "policy.tools"),
    ({"rules": [RULE], "facts": ["x"]}, "policy.facts"),
    ({"rules": [RULE], "constants": 5}, "policy.constants"),
    ({"rules": [{"id": [1], "require": "true"}]}, "rules[0]"),
    ({"rules": [{**RULE, "weight": "abc"}]}, "rules[0].weight"),
    ({"rules": [{**RULE, "weight": float("inf")}]}, "rules[0].weight"),
    ({"rules": [{**RULE, "weight": -1}]}, "rules[0].weight"),
    ({"rules": [{**RULE, "decision": {"refusal": 5}}]}, "rules[0]"),
    ({"rules": [{**RULE, "decision": {"call": [["a"]]}}]}, "rules[0].decision.call"),
    ({"rules": [RULE], "tools": {"writes": [{"name": "x"}]}}, "policy.tools.writes"),
    ({"rules": [RULE], "words": {"affirm": [{"yes": 1}]}}, "policy.words.affirm"),
    ({"rules": [{**RULE, "require": ["x"]}]}, "rules[0].require"),
    ({"rules": [{**RULE, "if_unknown": ["skip"]}]}, "rules[0]"),
    ({"rules": [{**RULE, "require": "not " * 3000 + "x"}]}, "rules[0].require"),
    ({"rules": [{**RULE, "require": "(" * 250 + "x" + ")" * 250}]}, "rules[0].require"),
    ({"rules": [{**RULE, "require": "-" * 150 + "x"}]}, "rules[0].require"),
    ({"rules": [RULE], "name": orjson.loads("[" * 300 + "]" * 300)}, "policy"),  # found by HYPOTHESIS_PROFILE=long
    ({"rules": [{**RULE, "require": "x" + "[0]" * 150}]}, "rules[0].require"),
])
def test_a_policy_of_the_wrong_shape_is_an_input_error_naming_the_field(policy, field):
    with pytest.raises(InputError) as caught:
        load_policy(policy)
    assert caught.value.field == field
    with pytest.raises(InputError):
        NSRReward({"policy": policy})


DEEP = orjson.loads("[" * 900 + '"leaf"' + "]" * 900)
FACTS = {"text": "abc", "items": [1, 2], "record": {"a": 1}, "huge": 10 ** 20, "big": 10 ** 7, "deep": DEEP,
         "nested": {"a": DEEP, "b": [1, {"c": 2}]}}


@pytest.mark.parametrize("source, value", [
    ("-text", UNKNOWN),
    ("-items", UNKNOWN),
    ("record[items]", UNKNOWN),
    ("record[record]", UNKNOWN),
    ("'x' * huge", UNKNOWN),
    ("items * huge", UNKNOWN),
    ("'x' * big", UNKNOWN),  # ten million characters: refused before it is built
    ("len('ab' * 3)", 6),
    ("flatten(deep)", ["leaf"]),
    ("leaves(nested)", ["leaf", 1, 2]),
    ("-3", -3),
])
def test_log_data_never_makes_an_expression_raise(source, value):
    evaluator = Evaluator(lambda name: FACTS.get(name, UNKNOWN), {})
    assert evaluator.evaluate(compile_expression(source, "rules[0].require")) == value


def test_flatten_and_leaves_keep_their_order():
    assert flatten([[1, [2, None]], 3, [[[4]]]]) == [1, 2, 3, 4]
    assert leaves({"id": "R1", "legs": [{"n": "F1"}, ("F2", None)], "x": None}) == ["R1", "F1", "F2"]
    assert flatten(None) == [] and flatten("a") == ["a"] and leaves(UNKNOWN) == []


@pytest.mark.parametrize("calls", [[["x"]], ["get_order"], [{"function": "get_order"}], [{"function": {"name": 5}}]])
def test_a_call_that_is_not_an_object_is_graded_as_a_nameless_call(calls):
    """Found by HYPOTHESIS_PROFILE=long: `tool_calls: [["x"]]` passes the transcript check, then nsr grading raised
    AttributeError. Every reward now sees such a call as one call with no name (a malformed call, not none)."""
    from stateset_agents.pipeline.grading import check_conversation
    from stateset_plugins.rewards._text import tool_calls
    from stateset_plugins.rewards.tool_calling import ToolCallingReward

    messages = [{"role": "user", "content": "where is my order A1?"},
                {"role": "assistant", "content": None, "tool_calls": calls}]
    assert [c["name"] for c in tool_calls(messages[1])] == [""] * len(calls)
    conversation, turns, _ = check_conversation({"id": "c", "messages": messages}, "transcripts.jsonl", 1)
    from stateset_agents.pipeline.improve import load_policy as load_policy_file

    import stateset_plugins.rewards as rewards

    airline = load_policy_file(Path(rewards.__file__).parent / "policies" / "airline.yaml")
    for reward in (NSRReward({"policy": airline}), ToolCallingReward({})):
        for grade in reward.grade_conversation(conversation, turns):
            assert 0.0 <= grade.score <= 1.0
