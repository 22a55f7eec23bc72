"""The evidence block of eval_results.json, shared by `train` (its held-out evaluation) and `evaluate`.

eval_results.json (the engine's format) holds ``reward``, ``protocol`` (greedy or K samples at T, max_new_tokens,
whether truncation fails), ``decoding``, ``totals`` and per case ``id``, ``prompt``, ``base`` / ``candidate``
(``output``, ``score``, ``truncated``, ``graded``, ``breakdown``; with K samples also ``samples`` and
``sample_sd``) and ``difference``. `add_statistics` adds:

* ``statistics``: `stats.paired_comparison` over cases (the case is the unit: with K samples a case's score is
  their mean), with the mean difference, bootstrap 95% interval and two-sided sign-flip p-value;
* ``truncation``: per side, the cases with a cut answer and the cut samples (None where the generator did not
  say), and whether a cut answer counted as a failure;
* ``complete_cases``: the same comparison restricted to the cases neither side cut (a gain that comes only from
  learning to stop is not a gain);
* ``sample_spread``: with K > 1 samples, the mean and largest per-case standard deviation over samples, per side;
* ``regressions``: the cases whose score fell, worst first.
"""
from __future__ import annotations

from typing import Any, Mapping, MutableMapping, Sequence

from . import stats

EVIDENCE_SCHEMA = 2


def case_scores(cases: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float]]:
    return ([float(c["base"]["score"]) for c in cases], [float(c["candidate"]["score"]) for c in cases])


def truncation_counts(cases: Sequence[Mapping[str, Any]], max_new_tokens: int | None = None,
                      protocol: Mapping[str, Any] | None = None) -> dict[str, Any]:
    counts: dict[str, Any] = {"max_new_tokens": max_new_tokens}
    if protocol:
        counts["counted_as"] = "failure" if protocol.get("truncation") == "failure" else "graded"
    for side in ("base", "candidate"):
        flags = [c[side].get("truncated") for c in cases]
        counts[side] = None if any(f is None for f in flags) else sum(bool(f) for f in flags)
        per_sample = [c[side].get("truncated_samples") for c in cases]
        counts[f"{side}_samples"] = None if any(n is None for n in per_sample) else sum(per_sample)
    counts["cases"] = len(cases)
    return counts


def complete_cases(cases: Sequence[Mapping[str, Any]], seed: int) -> dict[str, Any]:
    """The paired comparison over the cases that neither side's answer was cut in."""
    kept = [c for c in cases if c["base"].get("truncated") is False and c["candidate"].get("truncated") is False]
    out: dict[str, Any] = {"cases": len(kept), "ids_left_out": [c.get("id") for c in cases if c not in kept]}
    if kept:
        base, cand = case_scores(kept)
        out.update(totals=stats.paired_totals(base, cand), statistics=stats.paired_comparison(base, cand, seed=seed))
    return out


def sample_spread(cases: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    if not all("sample_sd" in c[side] for c in cases for side in ("base", "candidate")):
        return None
    return {side: {"mean_sd": stats.mean([c[side]["sample_sd"] for c in cases]),
                   "max_sd": max(c[side]["sample_sd"] for c in cases)} for side in ("base", "candidate")}


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
    results["statistics"] = {"schema": EVIDENCE_SCHEMA, "unit": "case", **stats.paired_comparison(base, cand,
                                                                                                    seed=seed)}
    results["truncation"] = truncation_counts(cases, decoding.get("max_new_tokens"), results.get("protocol"))
    results["complete_cases"] = complete_cases(cases, seed)
    results["sample_spread"] = sample_spread(cases)
    results["regressions"] = regressions(cases)
    return results
