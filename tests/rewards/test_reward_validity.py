"""Reward validity as it will be judged: the grouped cross-validation tools (stats), the logistic fit, and guards on
the out-of-fold figures of benchmarks/reward_validity.py on the real tau-airline dev data.

The guards are the figures the benchmark measured at the last run (benchmarks/results/reward_validity.json) minus a
margin of 0.02: a change to a reward that loses more than that out of fold fails here.
"""
from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from stateset_agents.pipeline.calibrate import fit_logistic
from stateset_agents.plugin_api.stats import (bootstrap_auc_interval, group_bootstrap_auc_interval, grouped_stratified_folds,
                                   out_of_fold_auc, roc_auc)
from tests.helpers.benchmarks import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
MARGIN = 0.02
#: Pooled out-of-fold ROC AUC measured at the last benchmark run: (a) shipped rules, (b) calibrated per fold.
MEASURED = {
    "tool_calling, with expected calls": (0.934, 0.934),
    "tool_calling, without expected calls": (0.700, None),
    "nsr, airline policy": (0.796, None),
    "customer_support": (0.754, None),
}
LENGTH_BASELINE = 0.391


# -------------------------------------------------------------------------------------------- folds and intervals


def test_folds_keep_groups_whole_and_every_fold_holds_both_classes():
    rng = random.Random(3)
    groups = [g for g in range(25) for _ in range(4)]
    labels = [rng.random() < 0.3 for _ in groups]
    folds = grouped_stratified_folds(groups, labels, 5, seed=0)
    for g in set(groups):
        assert len({f for f, h in zip(folds, groups) if h == g}) == 1
    for f in range(5):
        held = [y for y, h in zip(labels, folds) if h == f]
        assert any(held) and not all(held)
        assert 12 <= len(held) <= 28  # spread, not piled up
    assert folds == grouped_stratified_folds(groups, labels, 5, seed=0)
    assert any(folds != grouped_stratified_folds(groups, labels, 5, seed=s) for s in range(1, 5))
    # The same groups in another order: the same fold for each group (only the seed decides).
    order = list(range(len(groups)))
    rng.shuffle(order)
    shuffled = grouped_stratified_folds([groups[i] for i in order], [labels[i] for i in order], 5, seed=0)
    assert all(shuffled[k] == folds[i] for k, i in enumerate(order))


def test_positives_spread_over_folds_first_when_few_groups_hold_them():
    groups = list(range(10))
    labels = [True, True, True, False, False, False, False, False, False, False]
    folds = grouped_stratified_folds(groups, labels, 3, seed=7)
    assert {folds[i] for i in range(3)} == {0, 1, 2}  # each positive group in its own fold
    with pytest.raises(ValueError, match="at least 12 groups"):
        grouped_stratified_folds(groups, labels, 12)


def test_group_bootstrap_widens_the_interval_when_cases_are_copies():
    rng = random.Random(11)
    base_scores = [rng.random() for _ in range(40)]
    base_labels = [rng.random() < s for s in base_scores]
    # Each case four times over, as a task's four trials: one group each.
    scores = [s for s in base_scores for _ in range(4)]
    labels = [y for y in base_labels for _ in range(4)]
    groups = [g for g in range(40) for _ in range(4)]
    point = roc_auc(scores, labels)
    low, high = group_bootstrap_auc_interval(scores, labels, groups, draws=1000, seed=0)
    naive_low, naive_high = bootstrap_auc_interval(scores, labels, draws=1000, seed=0)
    assert low <= point <= high
    assert (high - low) > 1.5 * (naive_high - naive_low)  # ~2x: four copies are one observation, not four
    original_low, original_high = bootstrap_auc_interval(base_scores, base_labels, draws=1000, seed=0)
    assert (high - low) == pytest.approx(original_high - original_low, rel=0.25)
    assert (low, high) == group_bootstrap_auc_interval(scores, labels, groups, draws=1000, seed=0)


def test_out_of_fold_auc_pools_and_reports_each_fold():
    scores = [0.9, 0.1, 0.8, 0.7, 0.65, 0.6]
    labels = [1, 0, 1, 0, 0, 1]
    result = out_of_fold_auc(scores, labels, [0, 0, 1, 1, 2, 2])
    assert result["pooled"] == roc_auc(scores, labels) == pytest.approx(7 / 9)
    assert [f["auc"] for f in result["per_fold"]] == [1.0, 1.0, 0.0]
    one_class = out_of_fold_auc([0.1, 0.2, 0.3], [1, 1, 0], [0, 0, 1])
    assert one_class["per_fold"][0] == {"fold": 0, "cases": 2, "positives": 2, "auc": None}


# ------------------------------------------------------------------------------------------------ the logistic fit


def test_logistic_fit_recovers_log_odds_and_is_optimal_under_its_penalty():
    # One binary check: without a penalty the maximum-likelihood fit gives each cell its log odds.
    rows = [([0.0], 1.0, 3.0), ([0.0], 0.0, 7.0), ([1.0], 1.0, 6.0), ([1.0], 0.0, 2.0)]
    intercept, slope = fit_logistic(rows, C=1e9)
    assert intercept == pytest.approx(math.log(3 / 7), abs=1e-6)
    assert intercept + slope == pytest.approx(math.log(6 / 2), abs=1e-6)
    # With a penalty: the gradient of the penalised loss vanishes at the solution, and the slope shrinks.
    rng = random.Random(2)
    data = [([rng.gauss(0, 1), rng.gauss(0, 1)], float(rng.random() < 0.4), rng.choice((0.5, 1.0))) for _ in range(80)]
    theta = fit_logistic(data, C=0.5)
    grad = [0.0, 0.0, 0.0]
    for x, y, w in data:
        p = 1 / (1 + math.exp(-(theta[0] + theta[1] * x[0] + theta[2] * x[1])))
        for j, v in enumerate((1.0, *x)):
            grad[j] += w * (p - y) * v
    grad[1] += theta[1] / 0.5
    grad[2] += theta[2] / 0.5
    assert max(map(abs, grad)) < 1e-8
    loose = fit_logistic(data, C=1e6)
    assert abs(theta[1]) < abs(loose[1]) and abs(theta[2]) < abs(loose[2])
    with pytest.raises(ValueError, match="both classes"):
        fit_logistic([([1.0], 1.0, 1.0), ([0.0], 1.0, 1.0)], C=1.0)


# ---------------------------------------------------------------------------------- the real data, out of fold


@pytest.fixture(scope="module")
def benchmark():
    return load_benchmark("reward_validity")


@pytest.fixture(scope="module")
def policy():
    import json

    import yaml

    return json.loads(json.dumps(yaml.safe_load((ROOT / "plugins" / "stateset_plugins" / "rewards" / "policies"
                                                 / "airline.yaml").read_text())))


def test_benchmark_reads_the_data_as_the_test_helpers_do(benchmark):
    from tests.helpers.realdata import SHARED, tau_labels, tau_log_records

    for expected in (True, False):
        records, labels = benchmark.tau_records(SHARED, with_expected_calls=expected)
        assert records == tau_log_records(with_expected_calls=expected)
        assert labels == {k: v > 0.5 for k, v in tau_labels().items()}


@pytest.mark.parametrize("setting", list(MEASURED))
def test_out_of_fold_auc_holds(benchmark, policy, setting):
    from tests.helpers.realdata import SHARED

    label, reward, with_policy, expected = next(s for s in benchmark.SETTINGS if s[0] == setting)
    shipped, calibrated = MEASURED[setting]
    records, labels = benchmark.tau_records(SHARED, with_expected_calls=expected)
    config = {"policy": policy} if with_policy else {}
    if calibrated is None:  # (a) and (c) only: (b)'s nested fold loop takes 5-10 s here, run by the benchmark
        identity, _, scores = benchmark.grade(reward, config, records)
        ids = [r["id"] for r in records]
        groups = [r["metadata"]["task_id"] for r in records]
        y = [labels[i] for i in ids]
        folds = grouped_stratified_folds(groups, y, 5, seed=0)
        result = {"shipped": {"auc": out_of_fold_auc([scores[i] for i in ids], y, folds)["pooled"]},
                  "length": {"auc": roc_auc([len(r["messages"]) for r in records], y)}}
    else:
        result = benchmark.measure(reward, config, records, labels, folds=5, seed=0, draws=200)
        assert result["calibrated"]["auc"] >= calibrated - MARGIN
        assert all(f["positives"] > 0 for f in result["folds"])
        tasks = [t for f in result["folds"] for t in f["tasks"]]
        assert len(tasks) == len(set(tasks)) == 25  # a task lies in exactly one fold
    print(f"\n{setting}: out-of-fold AUC shipped {result['shipped']['auc']:.3f}"
          + (f", calibrated per fold {result['calibrated']['auc']:.3f}" if calibrated is not None else "")
          + f"; length-only {result['length']['auc']:.3f}")
    assert result["shipped"]["auc"] >= shipped - MARGIN
    assert result["length"]["auc"] == pytest.approx(LENGTH_BASELINE, abs=5e-4)
