"""The NSR policy file: the parsed YAML/JSON mapping checked, and its expressions compiled (`load_policy`).

Every shape the file can get wrong is an InputError naming its field, raised at load, before any conversation is
graded. The expression language itself is in `policy_language`.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from stateset_agents.core.errors import InputError

from .policy_language import DECISION_KINDS, SCORINGS, compile_expression


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def load_policy(policy: Any) -> dict[str, Any]:
    """Check the parsed policy mapping and compile every expression, failing early with the offending rule."""
    if not isinstance(policy, Mapping):
        raise InputError("the nsr reward needs a policy: pass config {'policy': <parsed YAML/JSON mapping>} "
                         "(e.g. --policy plugins/stateset_plugins/rewards/policies/airline.yaml)", field="policy")
    rules = policy.get("rules")
    if not isinstance(rules, list) or not rules:
        raise InputError("the policy has no rules: add a non-empty `rules:` list", field="policy.rules")
    tools = _section(policy, "tools")
    words, facts = _section(policy, "words"), _section(policy, "facts")
    scoring = policy.get("scoring", "kept_share")
    if scoring not in SCORINGS:
        raise InputError(f"policy `scoring` must be one of {', '.join(SCORINGS)}", field="policy.scoring")
    breach_factor = policy.get("breach_factor", 0.5)
    if isinstance(breach_factor, bool) or not isinstance(breach_factor, (int, float)) or not 0 < breach_factor < 1:
        raise InputError("policy `breach_factor` must be a number between 0 and 1 (exclusive)",
                         field="policy.breach_factor")
    compiled: dict[str, Any] = {
        "name": str(policy.get("name", "policy")),
        "scoring": scoring,
        "breach_factor": float(breach_factor),
        "constants": dict(_section(policy, "constants")),
        "writes": _names(tools.get("writes"), "policy.tools.writes"),
        "handoffs": _names(tools.get("handoffs"), "policy.tools.handoffs"),
        "words": {k: _phrases(v, f"policy.words.{k}") for k, v in words.items()},
        "facts": {},
        "rules": [],
    }
    for fact_name, source in facts.items():
        compiled["facts"][fact_name] = compile_expression(_source(source, f"facts.{fact_name}"),
                                                          f"facts.{fact_name}")
    seen = set()
    for position, rule in enumerate(rules):
        where = f"rules[{position}]"
        if not isinstance(rule, Mapping) or not rule.get("id") or rule.get("require") in (None, ""):
            raise InputError(f"{where} needs at least `id` and `require`", field=where)
        if not isinstance(rule["id"], (str, int)) or isinstance(rule["id"], bool):
            raise InputError(f"{where}.id must be a name (text), got {type(rule['id']).__name__}", field=where)
        if rule["id"] in seen:
            raise InputError(f"rule id {rule['id']!r} appears twice", field=where)
        seen.add(rule["id"])
        if_unknown = rule.get("if_unknown", "skip")
        if any(key is True for key in rule):  # YAML 1.1 reads a bare `on:` key as the boolean true
            raise InputError(f"{where} has an `on:` key, which YAML reads as true: write `decision:`", field=where)
        if not isinstance(if_unknown, str) or if_unknown not in ("skip", "kept", "broken"):
            raise InputError(f"{where}.if_unknown must be skip, kept or broken", field=where)
        counts = rule.get("counts", "always")
        if not isinstance(counts, str) or counts not in ("always", "when_broken"):
            raise InputError(f"{where}.counts must be always or when_broken", field=where)
        voids = rule.get("voids", False)
        if not isinstance(voids, bool):
            raise InputError(f"{where}.voids must be true or false, got {voids!r}"[:300], field=f"{where}.voids")
        compiled["rules"].append({
            "id": str(rule["id"]),
            "says": str(rule.get("says", "")),
            "decision": _parse_trigger(rule.get("decision", "turn"), where),
            "when": (compile_expression(_source(rule["when"], f"{where}.when"), f"{where}.when")
                     if rule.get("when") else None),
            "require": compile_expression(_source(rule["require"], f"{where}.require"), f"{where}.require"),
            "if_unknown": if_unknown,
            "counts": counts,
            "weight": _weight(rule.get("weight", 1.0), f"{where}.weight"),
            "voids": voids,
        })
    try:  # last, after the errors that say more: the policy travels in the reward's config, digested as JSON
        orjson.dumps({"policy": policy})
    except orjson.JSONEncodeError as exc:
        raise InputError(f"the policy cannot be written as JSON ({exc}): nested too deeply, or not JSON data",
                         field="policy") from None
    return compiled


def _section(policy: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """A top-level mapping of the policy (`tools`, `words`, `facts`, `constants`); absent or empty is {}."""
    value = policy.get(key)
    if value is None or value == [] or value == "":
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"policy `{key}` must be a mapping, got {type(value).__name__}", field=f"policy.{key}")
    return value


def _scalar_list(value: Any, field: str, what: str) -> list[Any]:
    items = _as_list(value)
    for item in items:
        if not isinstance(item, (str, int, float)) or isinstance(item, bool):
            raise InputError(f"{field} must be {what}, got {type(item).__name__} {item!r}"[:300], field=field)
    return items


def _names(value: Any, field: str) -> set[Any]:
    """Tool names: one name or a list of them."""
    return set(_scalar_list(value, field, "a tool name or a list of them"))


def _phrases(value: Any, field: str) -> tuple[str, ...]:
    return tuple(str(v) for v in _scalar_list(value, field, "a phrase or a list of phrases"))


def _source(value: Any, where: str) -> str:
    """An expression's text; a YAML scalar (`require: true`, `when: 3`) is the expression it spells."""
    if isinstance(value, (Mapping, list)):
        raise InputError(f"policy expression in {where} must be text, got {type(value).__name__}", field=where)
    return str(value)


def _weight(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf"):
        raise InputError(f"{field} must be a number, at least 0, got {value!r}"[:300], field=field)
    return float(value)


def _parse_trigger(on: Any, where: str) -> dict[str, Any]:
    """`decision:` is a decision kind ("write", "refusal", ...), `{call: [tool, ...]}` or `{refusal: {mentions: [...]}}`."""
    if isinstance(on, str):
        if on not in DECISION_KINDS:
            raise InputError(f"{where}.decision must be one of {', '.join(DECISION_KINDS)} or {{call: [...]}}; got {on!r}",
                             field=where)
        return {"kind": on}
    if isinstance(on, Mapping) and "call" in on:
        return {"kind": "call", "tools": _names(on["call"], f"{where}.decision.call")}
    if isinstance(on, Mapping) and "refusal" in on:
        refusal = on["refusal"] or {}
        if not isinstance(refusal, Mapping):
            raise InputError(f"{where}.decision.refusal must be a mapping ({{mentions: [...]}}) or empty",
                             field=where)
        return {"kind": "refusal", "mentions": _phrases(refusal.get("mentions"), f"{where}.decision.refusal")}
    raise InputError(f"{where}.decision is not one the policy language knows: {on!r}", field=where)
