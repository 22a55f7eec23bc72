"""`gsm8k`: is the final answer of a maths reply the reference answer?

One extractor reads both the reply and the reference, so "A: 18", "#### 18", "\\boxed{18}", "the answer is $18" and
a bare trailing "18" all compare equal. Numbers compare exactly (as fractions): 18 == 18.0 == 18.00, 1/2 == 0.5.
"""
from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Mapping

from stateset_agents import Reward, TurnGrade
from stateset_agents.plugin_api.text import message_text

from ._text import parse_number, number_tokens

# Markers in priority order: an explicit final-answer marker beats any number that merely comes last.
_HASH_MARKER = re.compile(r"####\s*(.+)")
_ANSWER_LINE = re.compile(r"(?im)^\s*(?:final\s+)?a(?:nswer)?\s*:\s*(.+)$")
_ANSWER_PHRASE = re.compile(r"(?i)\b(?:final\s+answer|the\s+answer)\s*(?:is|=|:)\s*(.+)")
_NO_REFERENCE = "no reference_answer in metadata or config"
_FRAC = re.compile(r"\\d?frac\{([^{}]*)\}\{([^{}]*)\}")


def _boxed_contents(text: str) -> list[str]:
    """Contents of every \\boxed{...}, with nested braces balanced."""
    found = []
    for match in re.finditer(r"\\boxed\s*\{", text):
        depth, start = 1, match.end()
        for index in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[index], 0)
            if depth == 0:
                found.append(text[start:index])
                break
    return found


def _first_number(fragment: str) -> Fraction | None:
    fragment = _FRAC.sub(r"\1/\2", fragment)
    return parse_number(fragment)


def extract_answer(text: str) -> tuple[Fraction | None, str]:
    """(value, how it was found). Used for the reply AND the reference, so both are read the same way."""
    if not text:
        return None, "empty"
    for how, pattern in (("####", _HASH_MARKER), ("A:", _ANSWER_LINE), ("the answer is", _ANSWER_PHRASE)):
        matches = list(pattern.finditer(text))
        for match in reversed(matches):  # the last marked answer is the final one
            value = _first_number(match.group(1))
            if value is not None:
                return value, how
    boxed = _boxed_contents(text)
    for content in reversed(boxed):
        value = _first_number(content)
        if value is not None:
            return value, "boxed"
    tokens = number_tokens(_FRAC.sub(r"\1/\2", text))
    if tokens:
        return parse_number(tokens[-1]), "last number"
    return None, "no number"


def _show(value: Fraction | None) -> str:
    if value is None:
        return "none"
    return str(value.numerator) if value.denominator == 1 else f"{float(value):g}"


class GSM8KReward(Reward):
    name = "gsm8k"
    version = "1.0.0"
    config_schema = {
        "type": "object",
        "properties": {
            "reference_answer": {"type": ["string", "number"],
                                 "description": "Used when the conversation's metadata has no reference_answer."},
        },
        "additionalProperties": False,
    }

    def screen(self, raw_json: bytes) -> str | None:
        # Most conversations of a mixed log are not maths questions: without the key in the text, no metadata holds
        # a reference. JSON can spell the key's letters as \u00XX escapes, so text with any such escape is parsed.
        if self.config.get("reference_answer") is None and b'"reference_answer"' not in raw_json \
                and b"\\u00" not in raw_json:
            return _NO_REFERENCE
        return None

    def grade_turn(self, conversation: Mapping[str, Any], turn_index: int) -> TurnGrade:
        return self.grade_conversation(conversation, [turn_index])[0]

    def grade_conversation(self, conversation: Mapping[str, Any], turns) -> list[TurnGrade]:
        # The reference is the conversation's: read it once, and without one no turn has anything to be judged by.
        metadata = conversation.get("metadata") or {}
        reference_raw = metadata.get("reference_answer", self.config.get("reference_answer"))
        if reference_raw is None:
            return [TurnGrade.not_applicable(_NO_REFERENCE) for _ in turns]
        reference, _ = extract_answer(str(reference_raw))
        if reference is None:
            reason = f"reference answer {str(reference_raw)[:40]!r} has no number"
            return [TurnGrade.not_applicable(reason) for _ in turns]
        messages = conversation["messages"]
        return [self._grade_reply(message_text(messages[t]), reference) for t in turns]

    @staticmethod
    def _grade_reply(reply: str, reference: Fraction) -> TurnGrade:
        if not reply.strip():
            return TurnGrade.not_applicable("turn has no text to grade (e.g. a tool call)")
        answer, how = extract_answer(reply)
        correct = answer is not None and answer == reference
        breakdown = {"answer": _show(answer), "reference": _show(reference), "found_by": how, "correct": correct}
        verdict = "correct" if correct else "wrong"
        return TurnGrade(score=1.0 if correct else 0.0, breakdown=breakdown,
                         reason=f"{verdict}: answer {_show(answer)} ({how}) vs reference {_show(reference)}")
