"""The one statistics module: every step that reports evidence (audit, train, evaluate, gate, benchmarks) uses it.

Pure Python and numpy-free on purpose: it runs in the light kernel install.
"""
from __future__ import annotations

import math
import random
from typing import Sequence


def _ranks(values: Sequence[float]) -> list[float]:
    """Average ranks (1-based), ties sharing the mean of their positions."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        mean_rank = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = mean_rank
        i = j + 1
    return ranks


def roc_auc(scores: Sequence[float], labels: Sequence[int | bool | float]) -> float:
    """Area under the ROC curve (Mann-Whitney U / (n_pos * n_neg)), ties counted as one half.

    Labels are truthy for positives. Raises ValueError when one class is empty (AUC is undefined).
    """
    if len(scores) != len(labels):
        raise ValueError("scores and labels differ in length")
    positives = [bool(v) for v in labels]
    n_pos = sum(positives)
    n_neg = len(positives) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError("ROC AUC needs at least one positive and one negative label")
    ranks = _ranks(list(scores))
    rank_sum = sum(r for r, p in zip(ranks, positives) if p)
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman rank correlation (Pearson on average ranks); nan when either side is constant."""
    return pearson(_ranks(list(x)), _ranks(list(y)))


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    n = len(x)
    if n != len(y) or n < 2:
        raise ValueError("pearson needs two equal-length sequences of at least 2 values")
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def bootstrap_auc_interval(scores: Sequence[float], labels: Sequence, *, draws: int = 2000, seed: int = 0,
                           level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval for ROC AUC, resampling cases; resamples with one class empty are redrawn."""
    rng = random.Random(seed)
    n = len(scores)
    values = []
    while len(values) < draws:
        idx = [rng.randrange(n) for _ in range(n)]
        lab = [labels[i] for i in idx]
        if all(lab) or not any(lab):
            continue
        values.append(roc_auc([scores[i] for i in idx], lab))
    return percentile_interval(values, level)


def percentile_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    ordered = sorted(values)
    alpha = (1 - level) / 2
    lo = ordered[max(0, int(math.floor(alpha * len(ordered))))]
    hi = ordered[min(len(ordered) - 1, int(math.ceil((1 - alpha) * len(ordered))) - 1)]
    return lo, hi
