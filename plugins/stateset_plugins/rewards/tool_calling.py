"""`tool_calling`: did the agent call the right tool with the right arguments?

Native `tool_calls` are the only signal (text that merely describes a call is not a call). Two modes:

* With `metadata.expected_tool_calls`: expected state-changing calls are a multiset consumed across the conversation
  (see docs/rewards.md, "tool_calling"). Lookups and hand-offs that were not expected are neutral.
* Without: each call must name a declared tool, its arguments must be a JSON object that validates against that
  tool's JSON schema.
"""
from __future__ import annotations

import json
import re
from fractions import Fraction
from typing import Any, Iterable, Mapping, Sequence

from stateset_agents import Reward, TurnGrade
from stateset_agents.components import assistant_turns

from ._text import parse_arguments, tool_calls
from ._tools import call_outcome, declared_tools, tool_kind

# A string argument longer than this many words is prose (a summary, a note): it matches any non-empty prose,
# because no two correct agents word a summary the same way.
PROSE_WORDS = 8
# A call to the right tool with wrong arguments is worth at most this much: the data ends up wrong anyway.
NAME_ONLY_CREDIT = 0.5


def normalise(value: Any, ordered: frozenset[str] = frozenset(), key: str | None = None) -> Any:
    """A canonical form for comparing arguments (choices documented in docs/rewards.md)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return Fraction(str(value))  # 250 == 250.0, and no float noise
    if isinstance(value, str):
        text = " ".join(value.split()).casefold()
        if _DIGIT.search(text) is not None:  # no number is written without a digit: skip the costly attempt
            try:
                return Fraction(text)  # "250" == 250: logged arguments often quote numbers
            except (ValueError, ZeroDivisionError):
                pass
        return "<prose>" if len(text.split()) > PROSE_WORDS else text
    if type(value) is dict or isinstance(value, Mapping):
        return {k: normalise(v, ordered, k) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        items = [normalise(v, ordered, key) for v in value]
        return items if key in ordered else sorted(items, key=_sort_key)
    return value


_DIGIT = re.compile(r"\d")  # what Fraction's parser requires somewhere in a number


def _sort_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def argument_agreement(actual: Mapping[str, Any], expected: Mapping[str, Any], ordered: frozenset[str]) -> float:
    """Share of top-level arguments (union of both sides; a missing one equals null) that agree after normalising."""
    return _agreement(normalise(actual, ordered), normalise(expected, ordered))


def _agreement(a: Any, e: Any) -> float:
    """`argument_agreement` of two normalised argument mappings."""
    keys = set(a) | set(e)
    if not keys:
        return 1.0
    return sum(a.get(k) == e.get(k) for k in keys) / len(keys)


class ToolCallingReward(Reward):
    name = "tool_calling"
    version = "1.0.0"
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

    def _kind(self, name: str, declared: Mapping[str, Any]) -> str:
        return tool_kind(name, declared.get(name), read_only=self._read_only, writes=self._writes)

    def grade_conversation(self, conversation: Mapping[str, Any], turns) -> list[TurnGrade]:
        """Against expected calls, a turn's grade depends on every earlier turn (what is still outstanding): one
        replay of the conversation grades all its turns, where `grade_turn` replays the prefix for each."""
        metadata = conversation.get("metadata") or {}
        turns = list(turns)
        everyone = assistant_turns(conversation)
        wanted = set(turns)
        if (metadata.get("expected_tool_calls") is None or not turns or turns != sorted(wanted)
                or not wanted.issubset(everyone)):
            return [self.grade_turn(conversation, t) for t in turns]
        expected = list(metadata["expected_tool_calls"])
        messages = conversation["messages"]
        declared = declared_tools(conversation)
        memo = _Memo(self, declared)
        required = [e for e in expected if memo.kind(e.get("name", "")) != "read"]
        outstanding = list(range(len(required)))
        exact_done: set[int] = set()
        last = everyone[-1]
        grades = {}
        for turn in everyone:
            if turn > turns[-1]:
                break
            judged = self._judge_calls(messages, turn, required, outstanding, exact_done, declared, memo)
            if turn in wanted:
                grades[turn] = self._expected_grade(judged, required, exact_done, turn == last)
        return [grades[t] for t in turns]

    # ------------------------------------------------------------------------------------------------ grading
    def grade_turn(self, conversation: Mapping[str, Any], turn_index: int) -> TurnGrade:
        metadata = conversation.get("metadata") or {}
        if metadata.get("expected_tool_calls") is not None:
            return self._grade_against_expected(conversation, turn_index, list(metadata["expected_tool_calls"]))
        return self._grade_against_schemas(conversation, turn_index)

    def _grade_against_schemas(self, conversation: Mapping[str, Any], turn_index: int) -> TurnGrade:
        calls = tool_calls(conversation["messages"][turn_index])
        if not calls:
            return TurnGrade.not_applicable("no tool call in this turn")
        declared = declared_tools(conversation)
        checks = [self._check_schema(call, declared) for call in calls]
        score = sum(c["score"] for c in checks) / len(checks)
        problems = [f"{c['name']}: {c['problem']}" for c in checks if c["problem"]]
        reason = "; ".join(problems) if problems else f"{len(calls)} call(s) valid against the declared schemas"
        return TurnGrade(score=score, breakdown={"calls": checks}, reason=reason)

    @staticmethod
    def _check_schema(call: Mapping[str, Any], declared: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """Three checks in sequence (declared, parses, validates); each failure also fails the ones after it."""
        import jsonschema  # imported here: only this mode needs it

        name = call["name"]
        result = {"name": name, "declared": name in declared or not declared, "parses": False, "valid": False,
                  "problem": None}
        if not result["declared"]:
            result.update(score=0.0, problem="invented tool (not among the declared tools)")
            return result
        arguments, error = parse_arguments(call["arguments"])
        if arguments is None:
            result.update(score=1 / 3, problem=error)
            return result
        result["parses"] = True
        schema = (declared.get(name) or {}).get("parameters") or {"type": "object"}
        errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
        if errors:
            where = ".".join(str(p) for p in errors[0].path) or "(root)"
            result.update(score=2 / 3, problem=f"arguments do not match the schema at {where}: {errors[0].message}")
            return result
        result.update(valid=True, score=1.0)
        return result

    def _grade_against_expected(self, conversation: Mapping[str, Any], turn_index: int,
                                expected: list[Mapping[str, Any]]) -> TurnGrade:
        messages = conversation["messages"]
        declared = declared_tools(conversation)
        required = [e for e in expected if self._kind(e.get("name", ""), declared) != "read"]
        outstanding = list(range(len(required)))
        exact_done: set[int] = set()
        # Replay earlier turns so this turn sees what is still outstanding (the prefix is the context).
        for earlier in assistant_turns(conversation):
            if earlier >= turn_index:
                break
            self._judge_calls(messages, earlier, required, outstanding, exact_done, declared)
        judged = self._judge_calls(messages, turn_index, required, outstanding, exact_done, declared)
        return self._expected_grade(judged, required, exact_done, self._is_last_assistant_turn(messages, turn_index))

    def _expected_grade(self, judged: list[dict[str, Any]], required: list[Mapping[str, Any]], exact_done: set[int],
                        last_turn: bool) -> TurnGrade:
        items = [j for j in judged if j["score"] is not None]
        breakdown: dict[str, Any] = {"calls": judged}
        if last_turn:
            # Completion is judged once, on the final assistant turn: the conversation is over by then.
            completion = len(exact_done) / len(required) if required else 1.0
            breakdown["expected_done"] = f"{len(exact_done)}/{len(required)}"
            items.append({"name": "completion", "score": completion})
        if not items:
            return TurnGrade.not_applicable("no state-changing or expected call in this turn", breakdown)
        score = sum(i["score"] for i in items) / len(items)
        return TurnGrade(score=score, breakdown=breakdown, reason=self._reason(judged, breakdown))

    def _judge_calls(self, messages: Sequence[Mapping[str, Any]], turn_index: int,
                     required: list[Mapping[str, Any]], outstanding: list[int], exact_done: set[int],
                     declared: Mapping[str, Any], memo: "_Memo | None" = None) -> list[dict[str, Any]]:
        judged = []
        memo = memo or _Memo(self, declared)
        for call in tool_calls(messages[turn_index]):
            name = call["name"]
            kind = memo.kind(name)
            verdict: dict[str, Any] = {"name": name, "kind": kind, "score": None, "match": None}
            arguments, error = parse_arguments(call["arguments"])
            candidates = [i for i in outstanding if required[i].get("name") == name]
            if declared and name not in declared:
                verdict.update(score=0.0, match="invented tool")
            elif arguments is None:
                verdict.update(score=0.0, match=error)
            elif candidates:
                actual = normalise(arguments, self._ordered)
                agreement = [(_agreement(actual, memo.expected(required, i)), i) for i in candidates]
                best, index = max(agreement, key=lambda pair: (pair[0], -pair[1]))
                took_effect = call_outcome(messages, turn_index, call["id"]) != "error"
                if best == 1.0:
                    verdict.update(score=1.0, match="expected call")
                    exact_done.add(index)
                    outstanding.remove(index)
                else:
                    verdict.update(score=NAME_ONLY_CREDIT * best, match=f"arguments agree {best:.0%}")
                    if took_effect:  # a wrong write used up its slot; an error changed nothing, so a retry may fix it
                        outstanding.remove(index)
            elif kind == "write":
                verdict.update(score=0.0, match="unexpected write")
            judged.append(verdict)
        return judged

    @staticmethod
    def _is_last_assistant_turn(messages: Sequence[Mapping[str, Any]], turn_index: int) -> bool:
        return not any(m.get("role") == "assistant" for m in messages[turn_index + 1:])

    @staticmethod
    def _reason(judged: Iterable[Mapping[str, Any]], breakdown: Mapping[str, Any]) -> str:
        parts = [f"{j['name']}: {j['match']}" for j in judged if j["score"] is not None]
        if "expected_done" in breakdown:
            parts.append(f"expected calls made exactly: {breakdown['expected_done']}")
        return "; ".join(parts)


class _Memo:
    """Within one conversation: tool kinds by name, and expected arguments normalised once (on first use)."""

    __slots__ = ("reward", "declared", "kinds", "normalised")

    def __init__(self, reward: ToolCallingReward, declared: Mapping[str, Any]):
        self.reward, self.declared = reward, declared
        self.kinds: dict[Any, str] = {}
        self.normalised: dict[int, Any] = {}

    def kind(self, name: Any) -> str:
        kind = self.kinds.get(name)
        if kind is None:
            kind = self.kinds[name] = self.reward._kind(name, self.declared)
        return kind

    def expected(self, required: list[Mapping[str, Any]], index: int) -> Any:
        if index not in self.normalised:
            self.normalised[index] = normalise(required[index].get("arguments") or {}, self.reward._ordered)
        return self.normalised[index]
