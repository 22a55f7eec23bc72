"""Text and message helpers shared by the first-party rewards (one copy of each, so rewards agree on them)."""
from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any, Iterable

import orjson


def tool_calls(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The message's native tool calls as `{"id", "name", "arguments"}` with arguments still the logged string."""
    calls = []
    for call in message.get("tool_calls") or ():
        # a call that is not an object (or has no object `function`, or no string name) stays a call, nameless,
        # so the rewards judge it as malformed instead of failing or not seeing it
        if type(call) is not dict and not isinstance(call, Mapping):  # (an exact dict skips the slower ABC check)
            call = {}
        function = call.get("function")
        if type(function) is not dict and not isinstance(function, Mapping):
            function = {}
        name = function.get("name")
        calls.append({"id": call.get("id"), "name": name if isinstance(name, str) else "",
                      "arguments": function.get("arguments")})
    return calls


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Arguments as logged -> (mapping, None), or (None, why) when they are not a JSON object."""
    if type(raw) is not str and isinstance(raw, Mapping):
        return dict(raw), None
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None  # a call without arguments
    if not isinstance(raw, str):
        return None, f"arguments are a {type(raw).__name__}, not a JSON string"
    try:
        value = _loads(raw)
    except ValueError as exc:
        return None, f"arguments are not valid JSON ({exc.msg})"
    if not isinstance(value, dict):
        return None, "arguments are not a JSON object"
    return value, None


_LONG_DIGITS = re.compile(r"\d{19}")


def _loads(text: str) -> Any:
    """`json.loads`, through orjson where that gives the same value (it is several times faster). orjson refuses
    NaN and Infinity, which `json` accepts, and reads integers beyond 64 bits as floats, which `json` keeps exact:
    text with a run of 19 digits, or that orjson refuses, is read by `json`. An object of strings only (most call
    arguments) holds no number, so orjson read it as `json` would: no need to look for the digits (a regex scan of
    the whole text)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)
    if type(value) is dict:
        for item in value.values():
            if type(item) is not str:
                break
        else:
            return value
    return json.loads(text) if _LONG_DIGITS.search(text) else value


def parse_json_maybe(text: str) -> Any:
    """A tool result as data when it is JSON, else the text itself."""
    try:
        return _loads(text)
    except (ValueError, TypeError):
        return text


def tool_result_index(messages: Sequence[Mapping[str, Any]], call_id: Any, start: int) -> int | None:
    """The index of the tool message answering `call_id`, searched from `start` up to the next assistant turn."""
    for index in range(start, len(messages)):
        message = messages[index]
        if message.get("role") == "assistant":
            return None
        if message.get("role") == "tool" and message.get("tool_call_id") == call_id:
            return index
    return None


def tool_result(messages: Sequence[Mapping[str, Any]], call_id: Any, start: int) -> Mapping[str, Any] | None:
    """The tool message answering `call_id`, searched from `start` up to the next assistant turn."""
    index = tool_result_index(messages, call_id, start)
    return None if index is None else messages[index]


_ERROR_WORD = re.compile(r"(?i)error\b")
_SPACES = re.compile(r"\s+")


def is_error_result(text: str) -> bool:
    """Tools conventionally report failure as text starting with "Error" or as a JSON object with an "error" key."""
    stripped = text.lstrip()
    if _ERROR_WORD.match(stripped):
        return True
    # An "error" key is written as those letters unless escaped: text with neither needs no parse.
    return stripped.startswith("{") and ("error" in stripped or "\\" in stripped) \
        and is_error_data(parse_json_maybe(stripped))


def is_error_data(data: Any) -> bool:
    """Is a parsed tool result (`parse_json_maybe` of text starting with "{") an object with an "error" key?
    `is_error_result`'s test of the data, for a caller that keeps the parse."""
    return isinstance(data, dict) and bool(data.get("error"))


@lru_cache(maxsize=512)
def phrase_pattern(phrases: tuple[str, ...]) -> re.Pattern[str] | None:
    """One case-insensitive regex matching any phrase on word boundaries ("hi" never matches inside "this")."""
    cleaned = [p.strip() for p in phrases if p and p.strip()]
    if not cleaned:
        return None
    # Longest first so "go ahead" wins over "go"; inner whitespace matches any run of spaces.
    alternatives = [r"\s+".join(re.escape(w) for w in p.split()) for p in sorted(cleaned, key=len, reverse=True)]
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)


_WORD_TOKEN = re.compile(r"\w+")


def word_tokens(text: str) -> list[str]:
    """The lower-cased word tokens (`\\w+`) of a text, in order."""
    return _WORD_TOKEN.findall(text.lower())


class Phrases:
    """A phrase list compiled for matching on word boundaries, case-insensitively (`phrase_pattern`).

    Most texts hold none of a list's phrases, and an alternation regex is slow, so a text is screened first: a
    phrase can only match where its longest word is one of the text's `word_tokens`. Given the set of those tokens,
    one set intersection settles it for the whole list; without it, substring tests do (cheaper than tokenising a
    text asked about once). Only a text that passes runs the regex. Non-ASCII text or phrases skip the screen
    (Unicode case folding is wider than `lower`), so the answer is always the regex's.
    """

    __slots__ = ("pattern", "_screen")

    def __init__(self, phrases: Iterable[str]):
        cleaned = tuple(p.strip() for p in phrases if p and p.strip())
        self.pattern = phrase_pattern(cleaned)
        longest = [max(_WORD_TOKEN.findall(p.lower()), key=len, default="") for p in cleaned]
        screenable = all(p.isascii() for p in cleaned) and all(longest)
        self._screen = frozenset(longest) if screenable else None

    def _may_match(self, text: str, words: frozenset[str] | None) -> bool:
        if self.pattern is None:
            return False
        if self._screen is None or not text.isascii():
            return True
        if words is None:  # one question about this text: substring tests beat tokenising it
            lowered = text.lower()
            return any(map(lowered.__contains__, self._screen))
        return not self._screen.isdisjoint(words)

    def search(self, text: str, words: frozenset[str] | None = None) -> bool:
        """Does any phrase occur? `words`: the set of the text's `word_tokens`, when the caller keeps it."""
        return self._may_match(text, words) and self.pattern.search(text) is not None

    def findall(self, text: str, words: frozenset[str] | None = None) -> list[str]:
        """The phrases present, lower-cased with inner whitespace collapsed, in order of appearance."""
        return find_pattern(text, self.pattern) if self._may_match(text, words) else []


@lru_cache(maxsize=1024)
def phrases(words: tuple[str, ...]) -> Phrases:
    """The compiled `Phrases` for a tuple of phrases, built once."""
    return Phrases(words)


def find_phrases(text: str, words: Iterable[str]) -> list[str]:
    """The phrases present in `text` on word boundaries, lower-cased, in order of appearance."""
    return phrases(tuple(words)).findall(text)


def find_pattern(text: str, pattern: re.Pattern[str] | None) -> list[str]:
    """The matches of a `phrase_pattern`, lower-cased with inner whitespace collapsed."""
    if pattern is None:
        return []
    return [_SPACES.sub(" ", m.group(0).lower()) for m in pattern.finditer(text)]


def has_phrase(text: str, words: Iterable[str]) -> bool:
    return phrases(tuple(words)).search(text)


# The user's explicit go-ahead for a state-changing action, and the words that cancel one said before it ("no,
# wait... yes" is not a yes). One copy for the rewards that read consent (customer_support's configurable defaults
# are the same words).
AFFIRM = ("yes", "yeah", "yep", "confirm", "confirmed", "proceed", "go ahead", "please do", "do it", "sounds good",
          "that's correct", "that is correct", "looks good", "looks correct")
NEGATE = ("no", "not yet", "don't", "do not", "wait", "hold on")


def affirmed(text: str, yes: Phrases, no: Phrases, words: frozenset[str] | None = None) -> bool:
    """Does the text say yes (a `yes` phrase) with no `no` phrase before it ("no, wait... yes" is not a yes)?
    `words`: the text's `word_tokens` as a set, when the caller keeps it."""
    said_yes = yes.findall(text, words)
    if not said_yes:
        return False
    said_no = no.findall(text, words)
    lowered = text.lower()
    return not said_no or lowered.find(said_no[0]) > lowered.find(said_yes[0])


def last_message(messages: Sequence[Mapping[str, Any]], role: str, before: int) -> tuple[int, Mapping[str, Any]] | None:
    for index in range(min(before, len(messages)) - 1, -1, -1):
        if messages[index].get("role") == role:
            return index, messages[index]
    return None


# Thousands separators only in groups of three, so "2,3" reads as two numbers, not 23.
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?|-?\.\d+")


def parse_number(text: str) -> Fraction | None:
    """A number as an exact Fraction: "1,234.50", "$18", "3/4", "-2", "18%" -> value; None when there is none.

    Exact fractions make 250 == 250.0 == "250.00" and 0.1 + 0.2 style float noise impossible.
    """
    match = _NUMBER.search(text.replace("\u2212", "-"))
    if not match:
        return None
    token = match.group(0).replace(",", "").replace(" ", "")
    try:
        if "/" in token:
            top, bottom = token.split("/")
            return Fraction(top) / Fraction(bottom) if Fraction(bottom) != 0 else None
        return Fraction(token)
    except (ValueError, ZeroDivisionError):
        return None


def number_tokens(text: str) -> list[str]:
    return [m.group(0) for m in _NUMBER.finditer(text.replace("\u2212", "-"))]
