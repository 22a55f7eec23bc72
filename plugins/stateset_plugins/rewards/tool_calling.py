"""`tool_calling`: did the agent call the right tool with the right arguments, on facts it had, with the user's
go-ahead, and did it do what it said it did?

Native `tool_calls` are the only calls (text that merely describes a call is not a call). Two modes:

* With `metadata.expected_tool_calls`: expected state-changing calls are a multiset consumed across the conversation;
  expected lookups must have been made by the final answer (see docs/rewards.md, "tool_calling").
* Without: each call must name a declared tool, its arguments must be a JSON object that validates against that
  tool's JSON schema, its values must come from the context, it must not fail or blindly repeat a failure, and a
  write needs the user's go-ahead.

In both, a reply that claims a change no call made since the user's last message scores 0. The checks that read
the conversation itself live in `_tool_grounding`, the replay against expected calls in `_expected_replay`.
"""
from __future__ import annotations

import copy
import marshal
from collections.abc import Mapping
from typing import Any

from stateset_agents import Reward, TurnGrade

from ._call_checks import RETRY_CREDIT, UNGROUNDED, call_means, mean
# (NAME_ONLY_CREDIT, CONDUCT_WEIGHT, normalise and argument_agreement are this reward's too: named here as before)
from ._expected_replay import (CONDUCT_WEIGHT, NAME_ONLY_CREDIT, _ExpectedReplay, argument_agreement,  # noqa: F401
                               normalise)
from ._text import parse_arguments
from ._tool_grounding import ConversationFacts, enum_values, value_leaves
from ._tools import declared_tools, name_kind, simply_valid, tool_kind

_NOT_ITS_ARGUMENTS = ("arguments the tool does not declare", "required arguments missing")


class ToolCallingReward(Reward):
    name = "tool_calling"
    version = "2.4.0"
    config_schema = {
        "type": "object",
        "properties": {
            "read_only_tools": {"type": "array", "items": {"type": "string"},
                                "description": "Tools that only read; overrides the name-verb guess."},
            "write_tools": {"type": "array", "items": {"type": "string"},
                            "description": "Tools that change state; overrides the name-verb guess."},
            "ordered_arguments": {"type": "array", "items": {"type": "string"},
                                  "description": "Argument names whose list order is meaningful."},
        },
        "additionalProperties": False,
    }

    def __init__(self, config=None):
        super().__init__(config)
        self._read_only = tuple(self.config.get("read_only_tools", ()))
        self._writes = tuple(self.config.get("write_tools", ()))
        self._ordered = frozenset(self.config.get("ordered_arguments", ()))
        self._declarations: dict[bytes, tuple] = {}  # `_derived_from_tools`
        self._last_declaration: tuple[bytes | None, tuple | None] = (None, None)

    def _kind(self, name: str, declared: Mapping[str, Any]) -> str:
        declaration = declared.get(name)
        if declaration is not None and declaration.get("annotations"):
            return tool_kind(name, declaration, read_only=self._read_only, writes=self._writes)
        return name_kind(name, self._read_only, self._writes)  # the name alone decides: judged once per name

    def grade_turn(self, conversation: Mapping[str, Any], turn_index: int) -> TurnGrade:
        return self.grade_conversation(conversation, [turn_index])[0]

    def grade_conversation(self, conversation: Mapping[str, Any], turns) -> list[TurnGrade]:
        """One pass over the conversation grades all the turns asked for (against expected calls, a turn's grade
        depends on every earlier turn: what is still outstanding), each from its prefix as `grade_turn` would."""
        turns = list(turns)
        if not turns:
            return []
        seen = _Seen(self, conversation)
        expected = (conversation.get("metadata") or {}).get("expected_tool_calls")
        if expected is None:
            return [self._grade_against_schemas(seen, t) for t in turns]
        return _ExpectedReplay(self, seen, list(expected)).grades(turns)

    # ------------------------------------------------------------------------------------ without expected calls
    def _grade_against_schemas(self, seen: "_Seen", turn: int) -> TurnGrade:
        calls = seen.facts.calls(turn)
        claimed = seen.facts.unbacked_claim(turn, acting=bool(calls))
        if not calls and not claimed:
            return TurnGrade.not_applicable("no tool call and no unbacked claim of a change in this turn")
        checks = [self._check_call(seen, turn, call) for call in calls]
        items = [c["score"] for c in checks]
        breakdown: dict[str, Any] = call_means(checks)
        breakdown["calls"] = checks
        problems = [f"{c['name']}: {c['problem']}" for c in checks if c["problem"]]
        if claimed:
            breakdown["claims"] = 0.0
            items.append(0.0)
            problems.append("the reply claims a change that no call made since the user's last message")
        reason = "; ".join(problems) if problems else f"{len(calls)} call(s) valid, grounded and in order"
        return TurnGrade(score=mean(items), breakdown=breakdown, reason=reason)

    def _check_call(self, seen: "_Seen", turn: int, call: Mapping[str, Any]) -> dict[str, Any]:
        """Schema first (declared, parses, validates: each failure also fails the ones after it), then what the
        conversation says of the call. Score = schema x fresh x mean(grounded, ok, consent where they apply)."""
        name = call["name"]
        declared = seen.declared
        result: dict[str, Any] = {"name": name, "declared": name in declared or not declared, "parses": False,
                                  "valid": False, "problem": None}
        if not result["declared"]:
            result.update(score=0.0, schema=0.0, problem="invented tool (not among the declared tools)")
            return result
        arguments, error = parse_arguments(call["arguments"])
        if arguments is None:
            result.update(score=1 / 3, schema=1 / 3, problem=error)
            return result
        result["parses"] = True
        problems = []
        violation = seen.schema_violation(name, arguments, full=True)
        result["valid"] = violation is None
        # Arguments that are not the tool's (one missing, one it does not declare) mean the wrong tool or a
        # malformed call: as bad as arguments that do not parse. A wrong type or format is a lesser slip.
        result["schema"] = 1.0 if violation is None else 1 / 3 if violation.startswith(_NOT_ITS_ARGUMENTS) else 2 / 3
        if violation:
            problems.append(violation)
        conduct = self._conduct(seen, turn, call, arguments, problems)
        result.update((k, v) for k, v in conduct.items() if k != "values")
        if seen.kind(name) == "write":
            result["consent"] = 1.0 if seen.facts.went_ahead(turn) else 0.0
            if not result["consent"]:
                problems.append("changes something without the user's explicit go-ahead")
            elif not seen.facts.proposed(conduct["values"], turn):
                # The go-ahead covers the change the agent described: values it never named were not agreed to.
                result["consent"] = 0.5
                problems.append("uses values the proposal the user agreed to did not name")
        outcome = seen.facts.outcome(turn, call["id"])
        if outcome != "unknown":
            result["ok"] = 0.0 if outcome == "error" else 1.0
            if outcome == "error":
                problems.append("the call returned an error")
        quality = [result[k] for k in ("grounded", "ok", "consent") if k in result]
        retry = 1.0 if result["fresh"] else RETRY_CREDIT
        result["score"] = result["schema"] * retry * (mean(quality) if quality else 1.0)
        result["problem"] = "; ".join(problems) or None
        return result

    def _conduct(self, seen: "_Seen", turn: int, call: Mapping[str, Any], arguments: Mapping[str, Any],
                 problems: list[str]) -> dict[str, Any]:
        """grounded (share of the call's values found in the context; absent when it has none) and fresh (0 when
        the same call already failed before)."""
        checks: dict[str, Any] = {}
        values = value_leaves(arguments, seen.enums(call["name"]))
        checks["values"] = values
        share, missing = seen.facts.grounded_share(values, turn)
        if share is not None:
            checks["grounded"] = share
            if missing:
                shown = ", ".join(str(v) for v in missing[:3])
                problems.append(f"{UNGROUNDED}: {shown}")
        checks["fresh"] = 0.0 if seen.facts.repeats_failure(turn, call) else 1.0
        if not checks["fresh"]:
            problems.append("repeats a call that already failed, unchanged")
        return checks


class _ToolKinds:
    """`kind(name)` within one conversation, each name judged once. Its own object, not a method of `_Seen`: the
    facts hold it, and a bound method would make `_Seen` and its facts a reference cycle, which only the cyclic
    collector frees (a graded conversation's whole tree with it: it cost tool_calling's grading a quarter of its
    time)."""

    __slots__ = ("reward", "declared", "_kinds")

    def __init__(self, reward: ToolCallingReward, declared: Mapping[str, Any]):
        self.reward, self.declared = reward, declared
        self._kinds: dict[Any, str] = {}

    def __call__(self, name: Any) -> str:
        kind = self._kinds.get(name)
        if kind is None:
            kind = self._kinds[name] = self.reward._kind(name, self.declared)
        return kind


# Logs declare the same tools in conversation after conversation. What `_Seen` derives from a declaration (the
# declared tools, each name's kind, enum options, schema shape and validator: functions of the declaration and the
# reward's config alone) is kept per declaration, keyed by its `marshal` bytes: marshal writes only exact built-in
# types, each tagged with its type (1, 1.0 and True, or a list and a tuple, differ), so equal bytes mean the same
# declaration; anything else (a str subclass or IntEnum, which compare equal to other values) is not cached. The
# reward holds what it keeps, for as long as it lives (its kinds refer back to it: one cycle per reward, not per
# conversation).
_DECLARATIONS_KEPT = 64
_NAMES_KEPT = 1024  # names judged per declaration (calls may name anything), beyond which it is derived afresh


def _derived_from_tools(reward: ToolCallingReward, conversation: Mapping[str, Any]) -> tuple:
    """(declared tools, kinds, enum options, validators, shapes by name) for the conversation's declaration."""
    tools = conversation.get("tools")
    key = None
    if tools:
        try:
            key = marshal.dumps(tools)
        except ValueError:  # not only built-in types, or nested too deeply
            pass
        else:
            last_key, derived = reward._last_declaration  # most often the previous conversation's: no hashing
            if key != last_key:
                derived = reward._declarations.get(key)
            if derived is not None and len(derived[1]._kinds) < _NAMES_KEPT and len(derived[2]) < _NAMES_KEPT \
                    and len(derived[4]) < _NAMES_KEPT:
                reward._last_declaration = (key, derived)
                return derived
    # What is kept is derived from a private copy, which no later edit of the caller's conversation can change.
    declared = declared_tools(conversation if key is None else {"tools": copy.deepcopy(tools)})
    derived = (declared, _ToolKinds(reward, declared), {}, {}, {})
    if key is not None:
        if len(reward._declarations) >= _DECLARATIONS_KEPT:
            reward._declarations.clear()
        reward._declarations[key] = derived
        reward._last_declaration = (key, derived)
    return derived


class _Seen:
    """Within one conversation: tool kinds, enum options and schema checks by tool name, and its facts."""

    __slots__ = ("reward", "messages", "declared", "kind", "_enums", "_validators", "_shapes", "facts")

    def __init__(self, reward: ToolCallingReward, conversation: Mapping[str, Any]):
        self.reward = reward
        self.messages = conversation["messages"]
        self.declared, self.kind, self._enums, self._validators, self._shapes = _derived_from_tools(reward,
                                                                                                  conversation)
        self.facts = ConversationFacts(self.messages, self.kind)

    def enums(self, name: str) -> frozenset[str]:
        enums = self._enums.get(name)
        if enums is None:
            enums = self._enums[name] = enum_values((self.declared.get(name) or {}).get("parameters"))
        return enums

    def schema_violation(self, name: str, arguments: Mapping[str, Any], full: bool) -> str | None:
        """Why the arguments do not fit the tool's declaration, or None. Always: no undeclared argument where the
        schema lists its properties, and every required one present; `full`: the whole JSON schema too."""
        shape = self._shapes.get(name)
        if shape is None:
            shape = self._shapes[name] = _shape(self.declared.get(name))
        schema, properties, required = shape
        if properties is not None and not properties.keys() >= arguments.keys():  # a key it does not declare
            unknown = sorted(str(k) for k in arguments if k not in properties)
            return f"{_NOT_ITS_ARGUMENTS[0]}: {', '.join(unknown)}"
        if required is not None:
            absent = [str(k) for k in required if k not in arguments]
            if absent:
                return f"{_NOT_ITS_ARGUMENTS[1]}: {', '.join(absent)}"
        if not full or simply_valid(schema, arguments):
            return None
        validator = self._validators.get(name)
        if validator is None:
            import jsonschema  # imported here: only this check needs it

            validator = self._validators[name] = jsonschema.Draft202012Validator(schema)
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            where = ".".join(str(p) for p in errors[0].path) or "(root)"
            return f"arguments do not match the schema at {where}: {errors[0].message}"
        return None


def _shape(tool: Mapping[str, Any] | None) -> tuple[Any, Mapping[str, Any] | None, list | None]:
    """A declared tool's (parameters schema, its properties where a mapping, its required list where a list)."""
    schema = (tool or {}).get("parameters") or {"type": "object"}
    is_mapping = type(schema) is dict or isinstance(schema, Mapping)
    properties = schema.get("properties") if is_mapping else None
    required = schema.get("required") if is_mapping else None
    return (schema, properties if type(properties) is dict or isinstance(properties, Mapping) else None,
            required if isinstance(required, list) else None)
