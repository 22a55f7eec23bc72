"""The evaluation protocol: greedy by default, K samples per case with the case as the unit, truncation as
failure, the complete-case gain, and reuse only under the same protocol. Unit tests drive `evaluate` with a
scripted backend and reward; the CLI tests use a real run of the tiny model."""
from __future__ import annotations

import json
import random

import pytest

from stateset_agents.cli import main
from stateset_agents.core.errors import InputError
from stateset_plugins.evaluators.paired import reusable
from stateset_plugins.models.batch import Generation
from stateset_plugins.models.evaluation import EvalProtocol, evaluate

CASES = [{"id": f"c{i}", "prompt": [{"role": "user", "content": f"q{i}"}], "tools": [], "metadata": {}}
         for i in range(4)]


class Tokenizer:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids)


class Renderer:
    tokenizer = Tokenizer()

    def prompt_ids(self, messages, tools=None):
        return [int(messages[-1]["content"][1:])]


class ScriptedBackend:
    """Answers case i with token 100*i (+1 for the adapter, + a seeded random draw when sampling); `cut` says which
    (case, adapter) answers run into the cap."""

    def __init__(self, cut=()):
        self.cut = set(cut)
        self.calls = []

    def generate(self, prompts, *, max_new_tokens, temperature, adapter=True):
        self.calls.append((adapter, temperature, max_new_tokens))
        out = []
        for (case,) in prompts:
            token = 100 * case + int(adapter) + (random.randrange(50) if temperature > 0 else 0)
            out.append(Generation(ids=[token], logps=[0.0], truncated=(case, adapter) in self.cut))
        return out


class EchoReward:
    """Scores an answer by its token: (token mod 100) / 100, so the adapter's answer beats the base's by 0.01 when
    greedy; counts what it was asked to grade."""

    def __init__(self):
        self.graded = 0

    def identity(self):
        return {"name": "echo", "version": "1", "config_sha256": "0" * 64}

    def grade(self, items):
        self.graded += len(items)
        out = []
        for item in items:
            text = item.conversation["messages"][-1]["content"]
            out.append({"score": (int(text) % 100) / 100, "applicable": True, "breakdown": {}, "reason": "echo",
                        "reward": self.identity()})
        return out


def test_greedy_is_the_default_and_ignores_the_training_temperature():
    backend, reward = ScriptedBackend(), EchoReward()
    results = evaluate(backend, Renderer(), reward, CASES)
    assert {call[1] for call in backend.calls} == {0.0}  # greedy, never the training sampling
    assert results["protocol"]["decoding"] == "greedy" and results["protocol"]["max_new_tokens"] == 256
    assert [c["difference"] for c in results["cases"]] == pytest.approx([0.01] * 4)
    with pytest.raises(TypeError):
        evaluate(backend, Renderer(), reward, CASES, type("TrainConfig", (), {"temperature": 1.0})())


def test_a_truncated_answer_is_a_failed_case_unless_allowed():
    cut = {(1, True), (2, False)}  # the candidate cut on case 1, the base on case 2
    reward = EchoReward()
    results = evaluate(ScriptedBackend(cut), Renderer(), reward, CASES)
    by_id = {c["id"]: c for c in results["cases"]}
    assert by_id["c1"]["candidate"]["score"] == 0.0 and by_id["c1"]["candidate"]["graded"] is False
    assert "truncated" in by_id["c1"]["candidate"]["reason"]
    assert by_id["c2"]["base"]["score"] == 0.0 and by_id["c2"]["candidate"]["score"] == pytest.approx(0.01)
    assert reward.graded == 8 - 2  # a cut answer is not graded
    t = results["truncation"]
    assert (t["base"], t["candidate"], t["counted_as"]) == (1, 1, "failure")
    # the gain restricted to cases neither side cut: c0 and c3 only
    complete = results["complete_cases"]
    assert complete["cases"] == 2 and sorted(complete["ids_left_out"]) == ["c1", "c2"]
    assert complete["statistics"]["mean_difference"] == pytest.approx(0.01)

    allowed = evaluate(ScriptedBackend(cut), Renderer(), EchoReward(), CASES, EvalProtocol(allow_truncation=True))
    c1 = next(c for c in allowed["cases"] if c["id"] == "c1")
    assert c1["candidate"]["graded"] is True and c1["candidate"]["score"] == pytest.approx(0.01)
    assert allowed["truncation"]["counted_as"] == "graded" and allowed["truncation"]["candidate"] == 1


def test_k_samples_score_a_case_by_their_mean_and_pair_over_cases():
    protocol = EvalProtocol(samples=5, temperature=1.0, seed=3)
    results = evaluate(ScriptedBackend(), Renderer(), EchoReward(), CASES, protocol)
    assert results["statistics"]["cases"] == 4 and results["statistics"]["unit"] == "case"  # not 20
    for case in results["cases"]:
        for side in ("base", "candidate"):
            scores = [s["score"] for s in case[side]["samples"]]
            assert len(scores) == 5 and case[side]["score"] == pytest.approx(sum(scores) / 5)
            assert case[side]["sample_sd"] > 0
        # sample k of the base and of the candidate share a seed: each pair differs by the adapter's +1 only
        pairs = zip(case["base"]["samples"], case["candidate"]["samples"])
        assert all(c["score"] - b["score"] == pytest.approx(0.01) for b, c in pairs)
    assert results["sample_spread"]["base"]["mean_sd"] > 0
    again = evaluate(ScriptedBackend(), Renderer(), EchoReward(), CASES, protocol)
    assert again["cases"] == results["cases"]  # seeded: the same samples
    other = evaluate(ScriptedBackend(), Renderer(), EchoReward(), CASES,
                     EvalProtocol(samples=5, temperature=1.0, seed=4))
    assert other["cases"] != results["cases"]


def test_bad_protocols_are_refused():
    with pytest.raises(InputError, match="need --temperature > 0"):
        EvalProtocol(samples=3)
    with pytest.raises(InputError, match="samples"):
        EvalProtocol(samples=0)
    with pytest.raises(InputError, match="has no top_p"):
        EvalProtocol.from_dict({"top_p": 0.9})


def test_results_of_another_protocol_are_never_reused():
    results = evaluate(ScriptedBackend(), Renderer(), EchoReward(), CASES)
    identity = EchoReward().identity()
    assert reusable(results, CASES, identity, EvalProtocol().describe())
    # greedy results are the same whatever the seed: reusable across seeds
    assert reusable(results, CASES, identity, EvalProtocol(seed=9).describe())
    for other in (EvalProtocol(max_new_tokens=64), EvalProtocol(allow_truncation=True),
                  EvalProtocol(samples=2, temperature=0.7)):
        assert not reusable(results, CASES, identity, other.describe())
    legacy = {k: v for k, v in results.items() if k != "protocol"}  # an older release's: sampled at train temperature
    assert not reusable(legacy, CASES, identity, EvalProtocol().describe())


# ------------------------------------------------------------------------------------------- on the tiny model


def cli_evaluate(run, workspace, out, *extra):
    return main(["evaluate", "--adapter", str(run / "adapter"), "--prompts", str(workspace / "held_out.txt"),
                 "--reward", "toy_digits", "--output", str(out), *extra])


def test_greedy_evaluation_is_deterministic_whatever_the_seed(trained_runs, workspace, tmp_path):
    run = trained_runs[0]
    outputs = []
    for i, seed in enumerate(("0", "7")):
        assert cli_evaluate(run, workspace, tmp_path / str(i), "--seed", seed, "--max-new-tokens", "24") == 0
        results = json.loads((tmp_path / str(i) / "eval_results.json").read_text())
        assert results["protocol"]["decoding"] == "greedy" and results["protocol"]["max_new_tokens"] == 24
        outputs.append([(c["base"]["text"], c["candidate"]["text"]) for c in results["cases"]])
    assert outputs[0] == outputs[1]


def test_sampled_evaluation_from_the_command_line(trained_runs, workspace, tmp_path, capsys):
    run = trained_runs[0]
    assert cli_evaluate(run, workspace, tmp_path / "bad", "--samples", "3") == 2
    assert "need --temperature > 0" in capsys.readouterr().err
    assert cli_evaluate(run, workspace, tmp_path / "k", "--samples", "3", "--temperature", "1.0",
                        "--max-new-tokens", "8", "--allow-truncation") == 0
    results = json.loads((tmp_path / "k" / "eval_results.json").read_text())
    assert results["protocol"]["samples"] == 3 and results["statistics"]["cases"] == 6
    assert all(len(c["candidate"]["samples"]) == 3 for c in results["cases"])
    assert "per-case sd over samples" in capsys.readouterr().out
