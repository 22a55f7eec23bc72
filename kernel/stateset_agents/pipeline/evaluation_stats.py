"""The evidence block of eval_results.json, shared by `train` (its held-out evaluation) and `evaluate`.

eval_results.json (the engine's format) holds ``reward``, ``decoding``, ``totals`` and per case ``id``, ``prompt``,
``base`` / ``candidate`` (``output``, ``score``, ``breakdown``, ...) and ``difference``. `add_statistics` adds:

* ``statistics``: `stats.paired_comparison` over cases (mean difference, bootstrap 95% interval, two-sided
  sign-flip p-value; exact up to 20 non-zero cases, Monte Carlo with >= 100,000 draws above);
* ``truncation``: how many generations hit max_new_tokens, per side (None where the generator did not say);
* ``regressions``: the cases whose score fell, worst first.
"""
from __future__ import annotations

from typing import Any, Mapping, MutableMapping, Sequence

from .. import stats

EVIDENCE_SCHEMA = 1


def case_scores(cases: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float]]:
    return ([float(c["base"]["score"]) for c in cases], [float(c["candidate"]["score"]) for c in cases])


def truncation_counts(cases: Sequence[Mapping[str, Any]], max_new_tokens: int | None = None) -> dict[str, Any]:
    counts: dict[str, Any] = {"max_new_tokens": max_new_tokens}
    for side in ("base", "candidate"):
        flags = [c[side].get("truncated") for c in cases]
        counts[side] = None if any(f is None for f in flags) else sum(bool(f) for f in flags)
    return counts


def regressions(cases: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    worse = []
    for c in cases:
        base, cand = float(c["base"]["score"]), float(c["candidate"]["score"])
        if cand < base:
            worse.append({"id": c.get("id"), "base": base, "candidate": cand, "difference": cand - base})
    return sorted(worse, key=lambda r: (r["difference"], str(r["id"])))


def add_statistics(results: MutableMapping[str, Any], *, seed: int | None = None) -> MutableMapping[str, Any]:
    """Add the evidence block to an eval_results dict in place (and return it). Deterministic for a given seed
    (default: the decoding seed)."""
    cases = results.get("cases") or []
    if not cases:
        raise ValueError("eval_results has no cases")
    decoding = results.get("decoding") or {}
    seed = int(decoding.get("seed", 0) if seed is None else seed)
    base, cand = case_scores(cases)
    for c in cases:
        c.setdefault("difference", float(c["candidate"]["score"]) - float(c["base"]["score"]))
    results["statistics"] = {"schema": EVIDENCE_SCHEMA, **stats.paired_comparison(base, cand, seed=seed)}
    results["truncation"] = truncation_counts(cases, decoding.get("max_new_tokens"))
    results["regressions"] = regressions(cases)
    return results
