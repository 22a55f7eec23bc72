"""`tool_calling`: did the agent call the right tool with the right arguments, on facts it had, with the user's
go-ahead, and did it do what it said it did?

Native `tool_calls` are the only calls (text that merely describes a call is not a call). Two modes:

* With `metadata.expected_tool_calls`: expected state-changing calls are a multiset consumed across the conversation;
  expected lookups must have been made by the final answer (see docs/rewards.md, "tool_calling").
* Without: each call must name a declared tool, its arguments must be a JSON object that validates against that
  tool's JSON schema, its values must come from the context, it must not fail or blindly repeat a failure, and a
  write needs the user's go-ahead.

In both, a reply that claims a change no call made since the user's last message scores 0. The checks that read
the conversation itself live in `_tool_grounding`.
"""
from __future__ import annotations

import copy
import fractions
import json
import marshal
import math
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

from stateset_agents import Reward, TurnGrade

from ._grounding import GroundingIndex, readable
from ._text import parse_arguments
from ._tool_grounding import PROSE_WORDS, ConversationFacts, enum_values, value_leaves
from ._tools import declared_tools, name_kind, simply_valid, tool_kind

# A call to the right tool with wrong arguments is worth at most this much: the data ends up wrong anyway.
NAME_ONLY_CREDIT = 0.5
# A call that repeats a failed one unchanged keeps this share of its score: a wasted call, but nothing invented.
RETRY_CREDIT = 0.5
# With expected calls, conduct (fit, grounding, retries, claims) weighs this much in a turn's score: enough to rank
# the cleaner of two turns whose expected calls went alike higher, too little to outweigh the expected calls.
CONDUCT_WEIGHT = 0.1
# Per-check keys averaged over a turn's calls to the top level of the breakdown (what `improve calibrate` weighs).
_CALL_CHECKS = ("schema", "grounded", "ok", "fresh", "consent")
_NOT_ITS_ARGUMENTS = ("arguments the tool does not declare", "required arguments missing")
_UNGROUNDED = "values found nowhere in what the user said or a tool returned"
_NOTHING_EXPECTED = "no state-changing or expected call in this turn"


def normalise(value: Any, ordered: frozenset[str] = frozenset(), key: str | None = None) -> Any:
    """A canonical form for comparing arguments (choices documented in docs/rewards.md)."""
    kind = type(value)
    if kind is str:  # the common cases first, by exact type; anything else takes the general path below
        return _normalised_string(value)
    if kind is dict:
        return {k: _normalised_string(v) if type(v) is str else normalise(v, ordered, k) for k, v in value.items()
                if v is not None}
    if isinstance(value, bool) or value is None:
        return value
    if type(value) is int:
        return value
    if kind is float and value.is_integer() and abs(value) < _EXACT_INTS:
        return int(value)  # what Fraction(str(value)) gives for a whole float written without an exponent
    if isinstance(value, float) and not math.isfinite(value):
        return value  # json.loads reads NaN and Infinity in arguments: NaN agrees with nothing, an infinity with itself
    if isinstance(value, (int, float)):
        return _whole(Fraction(str(value)))  # 250 == 250.0, and no float noise
    if isinstance(value, str):
        return _normalise_text(value)
    if type(value) is dict or isinstance(value, Mapping):
        return {k: normalise(v, ordered, k) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        items = [normalise(v, ordered, key) for v in value]
        return items if key in ordered else sorted(items, key=_sort_key)
    return value


_DIGIT = re.compile(r"\d")  # what Fraction's parser requires somewhere in a number
# Fraction(text) raises ValueError exactly when its own syntax does not match (int() accepts less): test that
# first rather than raise and catch twice for every date or phone number. A digit is the fallback test.
_NUMBER_SYNTAX = getattr(getattr(fractions, "_RATIONAL_FORMAT", None), "match", None) or _DIGIT.search
_EXACT_INTS = 2 ** 53  # every whole float below this is written as its digits and ".0"
_NUMERIC_CHARS = "0123456789+-./e_ "  # every ASCII character int() or Fraction() accepts in a casefolded number


def _normalise_text(value: str) -> Any:
    """`normalise` of a string: a number when it reads as one ("250" == 250), else its words, casefolded."""
    words = value.split()
    text = " ".join(words).casefold()  # casefolding never adds or removes whitespace: `words` still counts them
    # No number is written without a digit, nor (in ASCII) with a character outside these: skip the costly attempt
    # ("nw-100004" raised twice before it was known not to be a number).
    if (not text.strip(_NUMERIC_CHARS) or not text.isascii()) and _NUMBER_SYNTAX(text) is not None:
        if "_" not in text:  # int() reads "1_000"; Fraction, the reference here, does not
            try:
                return int(text)  # "250" == 250: logged arguments often quote numbers
            except ValueError:
                pass
        try:
            return _whole(Fraction(text))
        except (ValueError, ZeroDivisionError):
            pass
    return "<prose>" if len(words) > PROSE_WORDS else text


# Ids, codes and names recur across calls and conversations: each plain string normalised once (to a str, int or
# Fraction: immutable, so one result can be shared).
_normalised_string = lru_cache(maxsize=4096)(_normalise_text)


def _whole(number: Fraction) -> int | Fraction:
    """A whole number as an int, so that 250, 250.0 and "250" normalise to the very same value."""
    return int(number) if number.denominator == 1 else number


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
    return sum([a.get(k) == e.get(k) for k in keys]) / len(keys)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


class ToolCallingReward(Reward):
    name = "tool_calling"
    version = "2.2.0"
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
        breakdown: dict[str, Any] = _call_means(checks)
        breakdown["calls"] = checks
        problems = [f"{c['name']}: {c['problem']}" for c in checks if c["problem"]]
        if claimed:
            breakdown["claims"] = 0.0
            items.append(0.0)
            problems.append("the reply claims a change that no call made since the user's last message")
        reason = "; ".join(problems) if problems else f"{len(calls)} call(s) valid, grounded and in order"
        return TurnGrade(score=_mean(items), breakdown=breakdown, reason=reason)

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
        result["score"] = result["schema"] * retry * (_mean(quality) if quality else 1.0)
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
                problems.append(f"{_UNGROUNDED}: {shown}")
        checks["fresh"] = 0.0 if seen.facts.repeats_failure(turn, call) else 1.0
        if not checks["fresh"]:
            problems.append("repeats a call that already failed, unchanged")
        return checks


def _call_means(checks: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each per-call check averaged over the calls that have it: the turn's top-level numeric breakdown."""
    if len(checks) == 1:  # the usual turn: one call, whose checks are their own means
        only = checks[0]
        # 0.0 + v is `_mean((v,))` (sum starts from 0, so a -0.0 becomes 0.0 there too), without the calls
        return {key: 0.0 + only[key] for key in _CALL_CHECKS if key in only}
    means = {}
    for key in _CALL_CHECKS:
        values = [c[key] for c in checks if key in c]
        if values:
            means[key] = _mean(values)
    return means


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


class _ExpectedReplay:
    """Grading against expected calls: the conversation's calls replayed in order, consuming the expected ones."""

    __slots__ = ("reward", "seen", "required", "lookups", "outstanding", "exact_done", "lookup_credit",
                 "lookup_names", "lookups_grounded", "_normalised")

    def __init__(self, reward: ToolCallingReward, seen: _Seen, expected: list[Mapping[str, Any]]):
        self.reward, self.seen = reward, seen
        required: list[Mapping[str, Any]] = []
        lookups: list[Mapping[str, Any]] = []
        kind = seen.kind
        for e in expected:
            (lookups if kind(e.get("name", "")) == "read" else required).append(e)
        self.required = required
        # Where writes are expected, their arguments show what the agent looked up, and correct agents look things
        # up in different orders; where none is, nothing else shows that the agent got the facts it answers from.
        if required:
            lookups = []
        self.lookups = lookups
        self.outstanding = list(range(len(required)))
        self.exact_done: set[int] = set()
        self.lookup_credit = [0.0] * len(lookups)
        self.lookup_names = {e.get("name") for e in lookups} if lookups else set()
        self.lookups_grounded: list[float] = []
        self._normalised: dict[tuple[str, int], Any] = {}

    def _expected(self, which: str, index: int) -> Any:
        key = (which, index)
        if key not in self._normalised:
            source = self.required if which == "required" else self.lookups
            self._normalised[key] = normalise(source[index].get("arguments") or {}, self.reward._ordered)
        return self._normalised[key]

    def grades(self, turns: list[int]) -> list[TurnGrade]:
        everyone = self.seen.facts.assistant_turns
        if turns == everyone:  # the usual request: every assistant turn, in order
            last = everyone[-1]
            return [self._grade(turn, self._judge_calls(turn), turn >= last) for turn in everyone]
        wanted = set(turns)
        last = everyone[-1] if everyone else -1
        final = max(wanted)
        grades = {}
        for turn in sorted(wanted.union(everyone)):
            if turn > final:
                break
            judged = self._judge_calls(turn)
            if turn in wanted:
                grades[turn] = self._grade(turn, judged, turn >= last)
        return [grades[t] for t in turns]

    def _judge_calls(self, turn: int) -> list[dict[str, Any]]:
        seen = self.seen
        judged = []
        for call in seen.facts.calls(turn):
            name = call["name"]
            kind = seen.kind(name)
            verdict: dict[str, Any] = {"name": name, "kind": kind, "score": None, "match": None}
            arguments, error = parse_arguments(call["arguments"])
            outstanding = self.outstanding
            candidates = [i for i in outstanding if self.required[i].get("name") == name] if outstanding else []
            if seen.declared and name not in seen.declared:
                verdict.update(score=0.0, match="invented tool", conduct=0.0)
            elif arguments is None:
                verdict.update(score=0.0, match=error, conduct=0.0)
            else:
                if candidates or name in self.lookup_names:
                    actual = normalise(arguments, self.reward._ordered)
                    looked_up = self._credit_lookups(name, actual)
                    if candidates:
                        self._match(turn, call, actual, candidates, verdict)
                    elif looked_up is not None:
                        # Where only lookups are expected, the lookup is the answer's first step: its own turn is
                        # judged (and so can be curated), as a write's would be.
                        verdict.update(score=1.0 if looked_up == 1.0 else NAME_ONLY_CREDIT * looked_up,
                                       match="expected lookup" if looked_up == 1.0 else
                                       f"lookup arguments agree {looked_up:.0%}")
                if not candidates and kind == "write":
                    verdict.update(score=0.0, match="unexpected write")
                if verdict["match"] != "expected call":
                    self._check_conduct(turn, call, arguments, verdict)
                    if verdict["score"] and not verdict["fresh"]:
                        # The same call already failed: trying it again unchanged earns nothing a second time.
                        verdict.update(score=0.0, match="repeats a failed call")
            judged.append(verdict)
        return judged

    def _match(self, turn: int, call: Mapping[str, Any], actual: Any, candidates: list[int],
               verdict: dict[str, Any]) -> None:
        if len(candidates) == 1:  # the usual case: one expected call of this name is outstanding
            index = candidates[0]
            best = _agreement(actual, self._expected("required", index))
        else:
            agreement = [(_agreement(actual, self._expected("required", i)), i) for i in candidates]
            best, index = max(agreement, key=lambda pair: (pair[0], -pair[1]))
        if best == 1.0:
            verdict.update(score=1.0, match="expected call")
            self.exact_done.add(index)
            self.outstanding.remove(index)
        else:
            verdict.update(score=NAME_ONLY_CREDIT * best, match=f"arguments agree {best:.0%}")
            if self.seen.facts.outcome(turn, call["id"]) != "error":
                # a wrong write used up its slot; an error changed nothing, so a retry may fix it
                self.outstanding.remove(index)

    def _credit_lookups(self, name: str, actual: Any) -> float | None:
        """Credit the expected lookups of this name still short of an exact match; the best agreement this call
        reached with one of them, or None when none was outstanding (a lookup made again earns nothing new)."""
        best = None
        for i, lookup in enumerate(self.lookups):
            if lookup.get("name") == name and self.lookup_credit[i] < 1.0:
                agreement = _agreement(actual, self._expected("lookups", i))
                self.lookup_credit[i] = max(self.lookup_credit[i], agreement)
                best = agreement if best is None else max(best, agreement)
        return best

    def _check_conduct(self, turn: int, call: Mapping[str, Any], arguments: Mapping[str, Any],
                       verdict: dict[str, Any]) -> None:
        """The conduct of a call the expected calls do not vouch for: 0 when it does not fit its tool (a required
        argument missing, one undeclared) or uses a value found nowhere in the context, 0.5 when it repeats a
        failed call unchanged (a wasted call, but nothing invented), else 1."""
        problems: list[str] = []
        violation = self.seen.schema_violation(call["name"], arguments, full=False)
        verdict["schema"] = 1.0 if violation is None else 2 / 3
        if violation:
            problems.append(violation)
        conduct = self.reward._conduct(self.seen, turn, call, arguments, problems)
        del conduct["values"]
        verdict.update(conduct)
        if verdict["kind"] == "read" and "grounded" in verdict:
            # Correct agents look up codes, dates and sums they derived themselves: a lookup's values count
            # once, in the final turn's conduct, not as a fault of their own turn.
            self.lookups_grounded.append(verdict.pop("grounded"))
            problems[:] = [p for p in problems if not p.startswith(_UNGROUNDED)]
        invented = verdict.get("grounded", 1.0) < 1.0
        verdict["conduct"] = 0.0 if violation or invented else 1.0 if verdict["fresh"] else RETRY_CREDIT
        if problems:
            verdict["problem"] = "; ".join(problems)

    def _grounded_replies(self, last: int) -> tuple[float | None, list[str]]:
        """The mean grounding credit (`_grounding.GroundingIndex.credit`) of the replies up to `last` that state
        values written with digits (amounts, dates, ids), and the invented ones; (None, []) when none does. Expected
        calls vouch for the calls, never for what a reply tells the user: a reply that answers from a lookup never
        made states values found nowhere before it. It weighs as conduct, once, in the final turn (a reply turn
        with no call stays not applicable, as before)."""
        facts = self.seen.facts
        index: GroundingIndex | None = None
        credits: list[float] = []
        invented: list[str] = []
        for turn in facts.assistant_turns:
            if turn > last:
                break
            values = facts.digit_values(turn)
            if values:
                if index is None:
                    index = GroundingIndex(self.seen.messages)
                credit, missing = index.credit(values, turn)
                credits.append(credit)
                invented += missing
        return (_mean(credits) if credits else None), invented

    def _grade(self, turn: int, judged: list[dict[str, Any]], last_turn: bool) -> TurnGrade:
        facts = self.seen.facts
        claimed = facts.unbacked_claim(turn, bool(judged))
        if not judged and not claimed and not last_turn:  # most turns: nothing to score, nothing to build
            # (`TurnGrade.not_applicable`, inline)
            return TurnGrade(score=0.0, applicable=False, breakdown={"calls": judged}, reason=_NOTHING_EXPECTED)
        items: list[float] = []
        scores: list[float] = []
        conduct: list[float] = []
        checked: list[dict[str, Any]] = []
        parts: list[str] = []
        problems: list[str] = []
        # One pass, each list in the calls' order. A call nothing else scores (a lookup, a hand-off) counts as an
        # item of 0 when its conduct is at fault.
        for j in judged:
            score = j["score"]
            if score is not None:
                scores.append(score)
                items.append(score)
                parts.append(f"{j['name']}: {j['match']}")
            elif j.get("conduct", 1.0) < 1.0:
                items.append(0.0)
            if "conduct" in j:
                conduct.append(j["conduct"])
            if "schema" in j:
                checked.append(j)
            if j.get("problem"):
                problems.append(f"{j['name']}: {j['problem']}")
        parts += problems
        breakdown: dict[str, Any] = {}
        if scores:
            breakdown["expected"] = sum(scores) / len(scores)
        if checked:
            breakdown.update(_call_means(checked))
        breakdown["calls"] = judged
        if claimed:
            breakdown["claims"] = 0.0
            conduct.append(0.0)
            items.append(0.0)
            parts.append("the reply claims a change that no call made since the user's last message")
        if last_turn:
            # Completion is judged once, on the final assistant turn: the conversation is over by then.
            made = len(self.exact_done) + sum(self.lookup_credit)
            wanted = len(self.required) + len(self.lookups)
            breakdown["completion"] = made / wanted if wanted else 1.0
            breakdown["expected_done"] = f"{len(self.exact_done)}/{len(self.required)}"
            if self.lookups:
                breakdown["lookups"] = sum(self.lookup_credit) / len(self.lookups)
                parts.append(f"expected lookups made: {self.lookup_credit.count(1.0)}"
                             f"/{len(self.lookups)}")
            parts.append(f"expected calls made exactly: {breakdown['expected_done']}")
            items.append(breakdown["completion"])
            if self.lookups_grounded:
                breakdown["grounded_lookups"] = _mean(self.lookups_grounded)
                conduct.append(breakdown["grounded_lookups"])
            replies, invented = self._grounded_replies(turn)
            if replies is not None:
                breakdown["grounded_replies"] = replies
                if invented:
                    # A standing prohibition, like a claim's: telling the user only what the context holds earns
                    # nothing (it would dilute the other conduct faults), telling them invented values costs.
                    conduct.append(replies)
                    parts.append("replies state values no one said and no tool returned (not looked up?): "
                                 + ", ".join(readable(v) for v in invented[:5]))
        if not items:
            return TurnGrade.not_applicable(_NOTHING_EXPECTED, breakdown)
        # Conduct breaks ties: of two turns whose expected calls went alike, the cleaner one scores higher.
        breakdown["conduct"] = sum(conduct) / len(conduct) if conduct else 1.0  # (`_mean`, inline: every turn)
        score = (1 - CONDUCT_WEIGHT) * (sum(items) / len(items)) + CONDUCT_WEIGHT * breakdown["conduct"]
        return TurnGrade(score=score, breakdown=breakdown, reason="; ".join(parts))
