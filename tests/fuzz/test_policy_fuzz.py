"""Property tests of the nsr policy loader and language (plugins/stateset_plugins/rewards/policy_loading.py,
policy_language.py): every shipped policy file, mutated as data and as text, loads as `--policy` loads it or fails
with an InputError naming the field; a policy that loads grades real conversations (tau-airline, the samples) with
scores in [0, 1] and no other exception; generated expressions compile or are refused, and evaluate over any facts
without raising."""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from stateset_agents.core.errors import InputError
from stateset_agents.pipeline.improve import load_policy as load_policy_file
from stateset_plugins.rewards.nsr import NSRReward
from stateset_plugins.rewards.policy_language import FUNCTIONS, UNKNOWN, Evaluator, compile_expression
from tests.helpers.fuzzing import examples

from .corpus import ROOT, deep, json_values, mutated, mutated_line, seed, tau_records

POLICY_FILES = sorted([*(ROOT / "plugins/stateset_plugins/rewards/policies").glob("*.yaml"),
                       *(ROOT / "plugins/stateset_plugins/recipes/policies").glob("*.yaml"),
                       ROOT / "kernel/stateset_agents/samples/support_policy.yaml"])
policy_files = st.sampled_from(POLICY_FILES)


@functools.lru_cache(maxsize=None)
def conversations() -> tuple[dict, ...]:
    """Real conversations with their tools: two tau-airline logs and two sample support logs."""
    return (*tau_records()[:2], seed(0), seed(7))


def grade_all(reward: NSRReward) -> None:
    for conv in conversations():
        turns = [i for i, m in enumerate(conv["messages"]) if m["role"] == "assistant"]
        for grade in reward.grade_conversation(conv, turns):
            assert isinstance(grade.applicable, bool)
            assert 0.0 <= grade.score <= 1.0 and not math.isnan(grade.score), grade


def load_and_grade(path: Path) -> None:
    """What `improve run --reward nsr --policy PATH` does with the file, up to grading; only InputErrors escape."""
    try:
        reward = NSRReward({"policy": load_policy_file(path)})
    except InputError as exc:
        assert str(exc) and (exc.field or exc.path), exc
        return
    try:
        grade_all(reward)
    except InputError as exc:  # a name the policy uses that no fact defines: found when first evaluated
        assert "policy" in str(exc) or exc.field, exc


def test_every_shipped_policy_loads_and_grades_the_real_logs():
    for path in POLICY_FILES:
        grade_all(NSRReward({"policy": load_policy_file(path)}))


@given(path=policy_files, data=st.data())
@examples(30)
def test_a_mutated_policy_loads_or_names_what_is_wrong(path, data, tmp_path_factory):
    policy = yaml.safe_load(path.read_text())
    for _ in range(data.draw(st.integers(1, 3))):
        policy = data.draw(mutated(policy))
    target = tmp_path_factory.mktemp("policy") / "policy.json"
    try:
        target.write_text(json.dumps(policy))
    except (ValueError, RecursionError):  # nested past what the json module writes: no file to load
        return
    load_and_grade(target)


@given(path=policy_files, data=st.data())
@examples(20)
def test_a_policy_file_with_broken_text_loads_or_fails_clearly(path, data, tmp_path_factory):
    text = path.read_bytes()
    for _ in range(data.draw(st.integers(1, 4))):
        text = data.draw(mutated_line(text))
    target = tmp_path_factory.mktemp("policy") / "policy.yaml"
    target.write_bytes(text)
    load_and_grade(target)


# ------------------------------------------------------------------------------------------------ expressions

NAMES = ("args", "call", "turn", "x", "items", "text", "n", "user_confirmed", "true", "null", "_private")
_atoms = st.one_of(st.sampled_from(NAMES), st.integers(-3, 10 ** 20).map(str),
                   st.text(alphabet="abc'\\ ", max_size=4).map(repr), st.sampled_from(("[]", "[1, 'a']", "{}")))


def _expression(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.sampled_from((" and ", " or ", " == ", " != ", " < ", " >= ", " in ", " not in ", " + ", " - ",
                              " * ", " / ", " ** ", " | "))
    return st.one_of(
        st.tuples(inner, binary, inner).map("".join),
        st.tuples(st.sampled_from(("not ", "-", "+", "~")), inner).map("".join),
        st.tuples(inner, st.sampled_from((".a", ".b", ".__class__", "[0]", "[-1]", "['a']", "[x]", "[items]"))).map(
            "".join),
        st.tuples(st.sampled_from((*FUNCTIONS, "nope", "__import__")), st.lists(inner, max_size=3)).map(
            lambda t: f"{t[0]}({', '.join(t[1])})"),
        st.tuples(inner, inner).map(lambda t: f"[{t[0]} for v in {t[1]} if v]"),
        st.tuples(inner, inner, inner).map(lambda t: f"{t[0]} if {t[1]} else {t[2]}"),
        inner.map(lambda e: f"({e})"),
    )


expressions = st.one_of(st.recursive(_atoms, _expression, max_leaves=8), st.text(max_size=20),
                        st.integers(50, 400).map(lambda n: "not " * n + "x"),
                        st.integers(50, 400).map(lambda n: "(" * n + "x" + ")" * n))
facts = st.fixed_dictionaries({name: st.one_of(json_values, st.just(UNKNOWN), st.integers(0, 300).map(
    lambda n: deep(1, n))) for name in NAMES})


@given(source=expressions, values=facts)
@examples(150)
def test_an_expression_compiles_or_is_refused_and_evaluates_without_raising(source, values):
    try:
        expression = compile_expression(source, "rules[0].require")
    except InputError as exc:
        assert exc.field == "rules[0].require"
        return
    evaluator = Evaluator(lambda name: values.get(name, UNKNOWN), {})
    try:
        evaluator.evaluate(expression)
    except InputError as exc:  # a function no policy may call
        assert "unknown function" in str(exc)


@functools.lru_cache(maxsize=None)
def shipped_rewards() -> tuple[NSRReward, ...]:
    return tuple(NSRReward({"policy": load_policy_file(path)}) for path in POLICY_FILES)


@given(which=st.integers(0, len(POLICY_FILES) - 1), conv=st.sampled_from(range(4)), data=st.data())
@examples(60)
def test_a_shipped_policy_grades_mutated_real_conversations(which, conv, data):
    """The conversations `improve run` accepts (a string role on every message), mutated anywhere else: graded
    with scores in [0, 1], never an exception."""
    from stateset_agents.pipeline.grading import check_conversation

    conversation = data.draw(mutated(json.loads(json.dumps(conversations()[conv]))))
    try:
        conversation, turns, _ = check_conversation(conversation, "transcripts.jsonl", 1)
    except InputError:
        return
    for grade in shipped_rewards()[which].grade_conversation(conversation, turns):
        assert 0.0 <= grade.score <= 1.0 and isinstance(grade.applicable, bool)
