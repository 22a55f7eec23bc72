"""Held-out evaluation: the base model (adapter disabled) and the adapter answer the same prompts under one
evaluation protocol, and the same reward grades both, case by case.

The protocol (`EvalProtocol`) is the evaluation's own, never the training sampling temperature: greedy decoding by
default, or K samples per case at a temperature T (a case's score is the mean of its samples, the statistics pair
over cases). Answers run to the end token up to ``max_new_tokens``; an answer cut there is a failed answer, scored 0
without being graded, unless the protocol allows truncation.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from stateset_agents.core.components import GradeItem
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.plugin_api.evidence import add_statistics
from stateset_agents.plugin_api.stats import paired_totals
from stateset_agents.plugin_api.text import content_text

from .chat_format import parse_assistant
from .seeding import seed_everything

#: Long enough that an answer runs to its end token: a cut answer is a failed case (see docs/evaluation.md).
DEFAULT_EVAL_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class EvalProtocol:
    """How held-out answers are produced. ``samples`` 1 with ``temperature`` 0 is greedy (the default, independent
    of the seed); ``samples`` K > 1 needs ``temperature`` > 0."""

    samples: int = 1
    temperature: float = 0.0
    max_new_tokens: int = DEFAULT_EVAL_MAX_NEW_TOKENS
    seed: int = 0
    allow_truncation: bool = False

    def __post_init__(self):
        if not isinstance(self.samples, int) or self.samples < 1:
            raise InputError(f"samples must be a positive integer, got {self.samples!r}", field="samples")
        if self.temperature < 0 or not math.isfinite(self.temperature):
            raise InputError("the evaluation temperature must be >= 0", field="temperature")
        if self.samples > 1 and self.temperature == 0:
            raise InputError(f"{self.samples} samples per case need --temperature > 0 (greedy answers are all "
                             "alike)", field="temperature")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise InputError("max_new_tokens must be a positive integer", field="max_new_tokens")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> "EvalProtocol":
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in (values or {}).items() if v is not None}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InputError(f"the evaluation protocol has no {', '.join(unknown)} (its fields: "
                             f"{', '.join(sorted(known))})", field=unknown[0])
        return cls(**values)

    def describe(self) -> dict[str, Any]:
        """What eval_results.json records; `reusable` compares it whole. The seed does not change greedy answers,
        so it is recorded as None there (greedy results of any seed are the same results)."""
        return {"decoding": "greedy" if self.greedy else "sampled", "samples": self.samples,
                "temperature": self.temperature, "max_new_tokens": self.max_new_tokens,
                "seed": None if self.greedy else self.seed, "truncation": "allowed" if self.allow_truncation
                else "failure"}


def _generate(backend, renderer, cases, protocol: EvalProtocol, adapter: bool, sample: int):
    # one seed per sample index, the same for base and candidate: paired samples
    seed_everything(protocol.seed * 1_000_003 + sample)
    prompts = [renderer.prompt_ids(c["prompt"], c["tools"]) for c in cases]
    return backend.generate(prompts, max_new_tokens=protocol.max_new_tokens, temperature=protocol.temperature,
                            adapter=adapter)


def side_answers(backend, renderer, reward, cases, protocol: EvalProtocol, adapter: bool) -> list[dict[str, Any]]:
    """Per case: its samples (output, score, truncated, graded) and the case score, their mean."""
    identity = reward.identity()
    per_case: list[list[dict[str, Any]]] = [[] for _ in cases]
    for k in range(protocol.samples):
        gens = _generate(backend, renderer, cases, protocol, adapter, k)
        messages = [parse_assistant(renderer.tokenizer.decode(g.ids, skip_special_tokens=True)) for g in gens]
        graded = [i for i, g in enumerate(gens) if protocol.allow_truncation or not g.truncated]
        items = [GradeItem({"id": f"{cases[i]['id']}/{'candidate' if adapter else 'base'}",
                            "messages": [*cases[i]["prompt"], messages[i]], "tools": cases[i]["tools"],
                            "metadata": cases[i]["metadata"]}, turns=[len(cases[i]["prompt"])]) for i in graded]
        grades = dict(zip(graded, reward.grade(items) if items else []))
        for g in grades.values():
            if g.get("reward") != identity:  # base and candidate must be graded by one reward version and config
                raise StatesetError(f"a grade came back from {g.get('reward')}, not from the reward asked for "
                                    f"({identity}): refusing to compare scores of different rewards")
        for i, (m, gen) in enumerate(zip(messages, gens)):
            g = grades.get(i)
            per_case[i].append({"output": m, "text": content_text(m.get("content")), "truncated": bool(gen.truncated),
                                "graded": g is not None, "score": float(g["score"]) if g else 0.0,
                                "applicable": g.get("applicable", True) if g else None,
                                "breakdown": g.get("breakdown", {}) if g else {},
                                "reason": g.get("reason", "") if g else
                                f"truncated at {protocol.max_new_tokens} new tokens: a failed answer"})
    out = []
    for samples in per_case:
        scores = [s["score"] for s in samples]
        mean = sum(scores) / len(scores)
        spread = math.sqrt(sum((x - mean) ** 2 for x in scores) / (len(scores) - 1)) if len(scores) > 1 else 0.0
        first = samples[0]
        case = {**first, "score": mean, "truncated": any(s["truncated"] for s in samples),
                "truncated_samples": sum(s["truncated"] for s in samples)}
        if protocol.samples > 1:
            case.update(samples=samples, sample_sd=spread)
        out.append(case)
    return out


def evaluate(backend, renderer, reward, cases: Sequence[dict[str, Any]], protocol: EvalProtocol | None = None, *,
             base_answers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Paired evaluation under `protocol` (default: greedy, `DEFAULT_EVAL_MAX_NEW_TOKENS`). `base_answers` reuses
    the base model's answers from an earlier call with the same cases and protocol (the base does not change
    between checkpoints)."""
    protocol = protocol or EvalProtocol()
    if not isinstance(protocol, EvalProtocol):
        raise TypeError("evaluate takes an EvalProtocol (the training config's sampling is not the evaluation's)")
    base = base_answers if base_answers is not None else side_answers(backend, renderer, reward, cases, protocol, False)
    cand = side_answers(backend, renderer, reward, cases, protocol, adapter=True)
    rows = [{"id": c["id"], "prompt": c["prompt"], "base": b, "candidate": a, "difference": a["score"] - b["score"]}
            for c, b, a in zip(cases, base, cand)]
    totals = paired_totals([r["base"]["score"] for r in rows], [r["candidate"]["score"] for r in rows])
    results = {"reward": reward.identity(), "protocol": protocol.describe(),
               "decoding": {"temperature": protocol.temperature, "max_new_tokens": protocol.max_new_tokens,
                            "seed": protocol.seed, "samples": protocol.samples},
               "totals": totals, "cases": rows}
    return add_statistics(results)  # interval, p-value, truncation and regressions: the one statistics module
