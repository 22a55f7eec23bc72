"""The statistics module against known answers: brute-force permutation p-values, bootstrap coverage, and the
eval_results evidence block."""
from __future__ import annotations

import itertools
import math
import random

import pytest

from stateset_agents.plugin_api import stats
from stateset_agents.plugin_api.evidence import add_statistics


def brute_force_p(diffs):
    """Every sign pattern, written out: the definition the fast code must agree with."""
    observed = abs(sum(diffs))
    hits = sum(abs(sum(s * d for s, d in zip(signs, diffs))) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=len(diffs)))
    return hits / 2 ** len(diffs)


@pytest.mark.parametrize("diffs", [
    [0.5, 0.2, 0.1, -0.05, 0.3],
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    [0.3, -0.3, 0.2, -0.2, 0.1, 0.4, 0.05, -0.15, 0.25, 0.6, -0.01, 0.2],  # ties in |d| and mixed signs
    [0.1, 0.1, 0.1, 0.1, -0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1],  # many exactly equal sums
])
def test_exact_sign_flip_p_value_equals_brute_force(diffs):
    p, method, patterns = stats.sign_flip_p_value(diffs)
    assert method == "exact" and patterns == 2 ** len(diffs)
    assert p == pytest.approx(brute_force_p(diffs), abs=1e-12)


def test_known_p_values():
    # six cases, all better: only the observed pattern and its mirror are as extreme -> 2 / 64
    assert stats.sign_flip_p_value([0.2] * 6)[0] == pytest.approx(2 / 64)
    assert stats.sign_flip_p_value([0, 0, 0])[0] == 1.0
    # zeros are dropped: they cannot change any pattern's sum
    assert stats.sign_flip_p_value([0.2] * 6 + [0.0] * 30) == stats.sign_flip_p_value([0.2] * 6)


def test_monte_carlo_above_twenty_cases_agrees_with_exact_and_is_seeded():
    rng = random.Random(3)
    diffs = [rng.gauss(0.15, 1.0) for _ in range(24)]
    exact, _, _ = stats.sign_flip_p_value(diffs, exact_max=30)
    p, method, draws = stats.sign_flip_p_value(diffs)
    assert method == "monte_carlo" and draws >= 100_000
    assert abs(p - exact) < 4 * math.sqrt(exact * (1 - exact) / draws) + 1e-4
    assert stats.sign_flip_p_value(diffs) == (p, method, draws)  # same seed, same answer
    assert stats.sign_flip_p_value(diffs, draws=10)[2] == 100_000  # never fewer than 100,000 draws


def test_bootstrap_interval_covers_the_true_mean_near_the_nominal_rate():
    rng = random.Random(11)
    true_mean, covered, trials = 0.3, 0, 200
    for trial in range(trials):
        sample = [rng.gauss(true_mean, 1.0) for _ in range(40)]
        low, high = stats.bootstrap_mean_interval(sample, draws=1000, seed=trial)
        covered += low <= true_mean <= high
    # nominal 95%; the percentile bootstrap runs a little narrow at n = 40; 200 trials -> SE ~ 1.6 points
    assert 0.89 <= covered / trials <= 0.99, covered / trials


def test_paired_comparison_fields():
    base = [0.1, 0.5, 0.3, 0.9]
    cand = [0.4, 0.5, 0.6, 0.8]
    out = stats.paired_comparison(base, cand)
    assert out["mean_difference"] == pytest.approx(0.125)
    assert (out["improved"], out["regressed"], out["unchanged"]) == (2, 1, 1)
    assert out["interval"]["low"] <= out["mean_difference"] <= out["interval"]["high"]
    assert out["p_value"] == pytest.approx(brute_force_p([0.3, 0.3, -0.1]))
    with pytest.raises(ValueError):
        stats.paired_comparison([0.1], [0.2, 0.3])


def test_eval_results_evidence_block():
    cases = [{"id": f"c{i}", "prompt": [], "base": {"score": b, "truncated": i == 0},
              "candidate": {"score": c, "truncated": False}} for i, (b, c) in
             enumerate([(0.2, 0.9), (0.5, 0.1), (0.4, 0.4), (0.8, 0.7)])]
    results = add_statistics({"decoding": {"seed": 0, "max_new_tokens": 8}, "cases": cases})
    assert results["truncation"] == {"max_new_tokens": 8, "base": 1, "candidate": 0, "base_samples": None,
                                     "candidate_samples": None, "cases": 4}
    complete = results["complete_cases"]  # the gain where neither side was cut: c0 (base cut) left out
    assert complete["cases"] == 3 and complete["ids_left_out"] == ["c0"]
    assert complete["statistics"]["mean_difference"] == pytest.approx(((0.1 - 0.5) + 0 + (0.7 - 0.8)) / 3)
    assert [r["id"] for r in results["regressions"]] == ["c1", "c3"]  # worst first
    assert results["statistics"]["cases"] == 4 and "p_value" in results["statistics"]
    no_flags = add_statistics({"cases": [{"id": "a", "base": {"score": 0.1}, "candidate": {"score": 0.2}}]})
    assert no_flags["truncation"]["base"] is None  # unknown, never guessed
