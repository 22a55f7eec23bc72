"""`tool_calling` against expected calls: the conversation's calls replayed in order, consuming the expected ones
(see docs/rewards.md, "tool_calling"), and how arguments are compared with the expected ones (`normalise`)."""
from __future__ import annotations

import fractions
import json
import math
import re
from collections.abc import Mapping
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from stateset_agents import TurnGrade

from ._call_checks import RETRY_CREDIT, UNGROUNDED, call_means, mean
from ._grounding import GroundingIndex, readable
from ._text import parse_arguments
from ._tool_grounding import PROSE_WORDS

if TYPE_CHECKING:  # type hints only: tool_calling imports this module
    from .tool_calling import ToolCallingReward, _Seen

# A call to the right tool with wrong arguments is worth at most this much: the data ends up wrong anyway.
NAME_ONLY_CREDIT = 0.5
# With expected calls, conduct (fit, grounding, retries, claims) weighs this much in a turn's score: enough to rank
# the cleaner of two turns whose expected calls went alike higher, too little to outweigh the expected calls.
CONDUCT_WEIGHT = 0.1
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


class _ExpectedReplay:
    """Grading against expected calls: the conversation's calls replayed in order, consuming the expected ones."""

    __slots__ = ("reward", "seen", "required", "lookups", "outstanding", "exact_done", "lookup_credit",
                 "lookup_names", "lookups_grounded", "_normalised")

    def __init__(self, reward: "ToolCallingReward", seen: "_Seen", expected: list[Mapping[str, Any]]):
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
            problems[:] = [p for p in problems if not p.startswith(UNGROUNDED)]
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
        return (mean(credits) if credits else None), invented

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
            breakdown.update(call_means(checked))
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
                breakdown["grounded_lookups"] = mean(self.lookups_grounded)
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
        breakdown["conduct"] = sum(conduct) / len(conduct) if conduct else 1.0  # (`mean`, inline: every turn)
        score = (1 - CONDUCT_WEIGHT) * (sum(items) / len(items)) + CONDUCT_WEIGHT * breakdown["conduct"]
        return TurnGrade(score=score, breakdown=breakdown, reason="; ".join(parts))
