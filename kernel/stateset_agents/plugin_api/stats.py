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


def confusion_table(scores: Sequence[float], labels: Sequence, threshold: float) -> dict[str, float | int | None]:
    """Counts of predicted (score >= threshold) against actual (truthy label), with precision, recall, accuracy
    (None where undefined)."""
    if len(scores) != len(labels):
        raise ValueError("scores and labels differ in length")
    tp = fp = fn = tn = 0
    for s, y in zip(scores, labels):
        predicted = s >= threshold
        if y:
            tp += predicted
            fn += not predicted
        else:
            fp += predicted
            tn += not predicted
    n = tp + fp + fn + tn
    return {"threshold": threshold, "tp": tp, "fp": fp, "fn": fn, "tn": tn,
            "precision": tp / (tp + fp) if tp + fp else None,
            "recall": tp / (tp + fn) if tp + fn else None,
            "accuracy": (tp + tn) / n if n else None}


# ------------------------------------------------------------------------------------ paired comparisons (evaluation)

#: Sign-flip tests enumerate every sign pattern exactly up to this many non-zero differences.
EXACT_SIGN_FLIP_MAX = 20
#: Monte Carlo sign-flip draws above that (never fewer).
MIN_SIGN_FLIP_DRAWS = 100_000
_TIE_TOLERANCE = 1e-9  # relative: |statistic| within this of the observed one counts as "as extreme"


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("the mean of no values is undefined")
    return math.fsum(values) / len(values)


def paired_differences(base: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """candidate - base, case by case."""
    if len(base) != len(candidate):
        raise ValueError(f"paired samples differ in length ({len(base)} base, {len(candidate)} candidate)")
    return [float(c) - float(b) for b, c in zip(base, candidate)]


def bootstrap_mean_interval(values: Sequence[float], *, draws: int = 10_000, seed: int = 0,
                            level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean, resampling cases with replacement (seeded, so reproducible)."""
    if not values:
        raise ValueError("a bootstrap interval needs at least one value")
    rng = random.Random(seed)
    n = len(values)
    data = list(values)
    means = [math.fsum(rng.choices(data, k=n)) / n for _ in range(draws)]
    return percentile_interval(means, level)


def _subset_sums(values: Sequence[float]) -> list[float]:
    """sum(s_i * v_i) over every sign pattern s in {-1, +1}^n (2^n entries)."""
    sums = [0.0]
    for v in values:
        sums = [s + v for s in sums] + [s - v for s in sums]
    return sums


def _count_extreme_exact(values: Sequence[float], threshold: float) -> int:
    """How many of the 2^n sign patterns give |sum| >= threshold. Meet in the middle: the sums of two halves are
    enumerated (2^(n/2) each) and the pairs are counted by binary search, so n = 20 costs ~2,000 lookups."""
    import bisect

    half = len(values) // 2
    left, right = _subset_sums(values[:half]), sorted(_subset_sums(values[half:]))
    count = 0
    for a in left:
        # a + b >= threshold  or  a + b <= -threshold
        count += len(right) - bisect.bisect_left(right, threshold - a)
        count += bisect.bisect_right(right, -threshold - a)
    return count


def _count_extreme_monte_carlo(values: Sequence[float], threshold: float, draws: int, seed: int) -> int:
    """Random sign patterns (one bit per case). Cases are taken 8 at a time through a 256-entry table of signed
    sums, so one draw costs n/8 lookups instead of n multiplications."""
    rng = random.Random(seed)
    chunks = [values[i:i + 8] for i in range(0, len(values), 8)]
    tables = []
    for chunk in chunks:
        table = []
        for bits in range(1 << len(chunk)):
            table.append(math.fsum(v if (bits >> k) & 1 else -v for k, v in enumerate(chunk)))
        tables.append(table)
    n = len(values)
    count = 0
    for _ in range(draws):
        pattern = rng.getrandbits(n)
        total = 0.0
        for k, table in enumerate(tables):
            total += table[(pattern >> (8 * k)) & 0xFF]
        if abs(total) >= threshold:
            count += 1
    return count


def sign_flip_p_value(differences: Sequence[float], *, draws: int = MIN_SIGN_FLIP_DRAWS, seed: int = 0,
                      exact_max: int = EXACT_SIGN_FLIP_MAX) -> tuple[float, str, int]:
    """Two-sided paired sign-flip (permutation) test of "mean difference is 0".

    Under the null each case's difference is as likely to have either sign, so the p-value is the share of sign
    patterns whose |sum| is at least the observed |sum|. Zero differences are dropped (flipping them changes
    nothing). Returns (p, method, patterns): exact enumeration when at most `exact_max` non-zero cases remain,
    else seeded Monte Carlo with max(draws, 100,000) draws and the add-one estimate (1 + hits) / (1 + draws), which
    is never 0.
    """
    nonzero = [float(d) for d in differences if d != 0]
    if not nonzero:
        return 1.0, "exact", 1
    observed = abs(math.fsum(nonzero))
    threshold = observed - _TIE_TOLERANCE * max(1.0, observed)
    if len(nonzero) <= exact_max:
        patterns = 1 << len(nonzero)
        return _count_extreme_exact(nonzero, threshold) / patterns, "exact", patterns
    draws = max(int(draws), MIN_SIGN_FLIP_DRAWS)
    hits = _count_extreme_monte_carlo(nonzero, threshold, draws, seed)
    return (1 + hits) / (1 + draws), "monte_carlo", draws


def paired_totals(base: Sequence[float], candidate: Sequence[float]) -> dict[str, float | int]:
    """The descriptive part of a paired comparison: the keys of eval_results.json's ``totals``."""
    diffs = paired_differences(base, candidate)
    if not diffs:
        raise ValueError("a paired comparison needs at least one case")
    return {"cases": len(diffs), "base_mean": mean(base), "candidate_mean": mean(candidate),
            "mean_difference": mean(diffs), "improved": sum(d > 0 for d in diffs),
            "regressed": sum(d < 0 for d in diffs), "unchanged": sum(d == 0 for d in diffs)}


def paired_comparison(base: Sequence[float], candidate: Sequence[float], *, seed: int = 0, level: float = 0.95,
                      bootstrap_draws: int = 10_000, permutation_draws: int = MIN_SIGN_FLIP_DRAWS
                      ) -> dict[str, float | int | str | dict]:
    """Everything `evaluate`, `train` and `gate` report about a paired comparison over cases, as one dict:
    `paired_totals`, a bootstrap interval for the mean difference and the sign-flip p-value."""
    totals = paired_totals(base, candidate)
    diffs = paired_differences(base, candidate)
    low, high = bootstrap_mean_interval(diffs, draws=bootstrap_draws, seed=seed, level=level)
    p, method, patterns = sign_flip_p_value(diffs, draws=permutation_draws, seed=seed)
    return {
        **totals,
        "interval": {"level": level, "low": low, "high": high, "method": "percentile bootstrap over cases",
                     "draws": bootstrap_draws, "seed": seed},
        "p_value": p,
        "p_value_method": f"two-sided sign-flip permutation over cases ({method})",
        "permutation_patterns": patterns,
    }


# ------------------------------------------------------------------------ grouped validation (rewards, calibration)


def grouped_stratified_folds(groups: Sequence, labels: Sequence, k: int, *, seed: int = 0) -> list[int]:
    """A fold index (0..k-1) per case. Cases of one group always share a fold (a task's trials are never split),
    and groups are spread so that each fold's share of each class is as even as it can be, every fold holding a
    positive and a negative where enough groups hold one (as sklearn's StratifiedGroupKFold, greedily).

    Deterministic for a seed: groups are visited in a seeded shuffle, stably sorted by how unbalanced their labels
    are (most first); each goes to the fold that (first) lacks a class it brings, then minimises the spread of
    per-class shares across folds, then holds fewest cases, then has the lowest index.
    """
    if len(groups) != len(labels):
        raise ValueError("groups and labels differ in length")
    members: dict = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    if k < 2:
        raise ValueError("cross-validation needs at least 2 folds")
    if len(members) < k:
        raise ValueError(f"{k} folds need at least {k} groups, got {len(members)}")
    positives = [bool(v) for v in labels]
    totals = (len(positives) - sum(positives), sum(positives))  # (negatives, positives)
    names = sorted(members, key=repr)  # a fixed order before the seeded shuffle, whatever the input order
    random.Random(seed).shuffle(names)
    counts = {g: (sum(not positives[i] for i in members[g]), sum(positives[i] for i in members[g])) for g in names}

    def imbalance(g) -> float:
        neg, pos = counts[g]
        return abs(pos - neg) / (pos + neg)

    names.sort(key=imbalance, reverse=True)  # stable: ties keep the seeded order
    fold_counts = [[0, 0] for _ in range(k)]
    fold_of_group = {}
    for g in names:
        brings = counts[g]
        candidates = list(range(k))
        for c in (1, 0):  # a fold with no positives (then no negatives) is served first
            if brings[c]:
                lacking = [f for f in candidates if fold_counts[f][c] == 0]
                if lacking:
                    candidates = lacking

        def spread(f: int) -> tuple[float, int, int]:
            cost = 0.0
            for c in (0, 1):
                if not totals[c]:
                    continue
                shares = [(fold_counts[j][c] + (brings[c] if j == f else 0)) / totals[c] for j in range(k)]
                m = sum(shares) / k
                cost += math.sqrt(sum((s - m) ** 2 for s in shares) / k)
            return round(cost, 12), sum(fold_counts[f]), f

        best = min(candidates, key=spread)
        fold_of_group[g] = best
        fold_counts[best][0] += brings[0]
        fold_counts[best][1] += brings[1]
    return [fold_of_group[g] for g in groups]


def group_bootstrap_auc_interval(scores: Sequence[float], labels: Sequence, groups: Sequence, *, draws: int = 2000,
                                 seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval for ROC AUC that resamples whole groups with replacement (a cluster
    bootstrap): cases of one group (a task's trials) are not independent, and resampling them one by one would
    give too narrow an interval. Resamples with one class empty are redrawn."""
    if not len(scores) == len(labels) == len(groups):
        raise ValueError("scores, labels and groups differ in length")
    members: dict = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    clusters = [members[g] for g in sorted(members, key=repr)]
    positives = [bool(v) for v in labels]
    if all(positives) or not any(positives):
        raise ValueError("ROC AUC needs at least one positive and one negative label")
    rng = random.Random(seed)
    n = len(clusters)
    values = []
    while len(values) < draws:
        idx = [i for _ in range(n) for i in clusters[rng.randrange(n)]]
        lab = [positives[i] for i in idx]
        if all(lab) or not any(lab):
            continue
        values.append(roc_auc([scores[i] for i in idx], lab))
    return percentile_interval(values, level)


def out_of_fold_auc(scores: Sequence[float], labels: Sequence, folds: Sequence[int]) -> dict[str, object]:
    """Out-of-fold scores (each case scored by what was fitted without its fold) -> the pooled ROC AUC over every
    case, and each fold's own AUC (None for a fold without both classes) with its counts."""
    if not len(scores) == len(labels) == len(folds):
        raise ValueError("scores, labels and folds differ in length")
    per_fold = []
    for f in sorted(set(folds)):
        idx = [i for i, g in enumerate(folds) if g == f]
        lab = [bool(labels[i]) for i in idx]
        both = any(lab) and not all(lab)
        per_fold.append({"fold": f, "cases": len(idx), "positives": sum(lab),
                         "auc": roc_auc([scores[i] for i in idx], lab) if both else None})
    return {"pooled": roc_auc(scores, labels), "per_fold": per_fold}
