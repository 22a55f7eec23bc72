"""Replacing personal identifiers in transcripts with stable placeholders (`ingest --redact`).

Detected by shape *and* checksum where one exists, so ids that merely look numeric are left alone:
e-mail addresses, IBANs (mod-97), payment card numbers (13-19 digits, issuer prefix, Luhn), US social security
numbers (dashed, valid area/group/serial), phone numbers (separated NANP `555-123-4567` / `(555) 123-4567`, or
international with a leading `+`; a bare run of digits is not a phone number), IPv4 and IPv6 addresses.

Within one conversation the same value always gets the same placeholder (`<EMAIL_1>`, `<EMAIL_2>`, ...), so a
redacted transcript still shows that the user and the tool result mean the same address.
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import orjson


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _luhn(number: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(number)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(text: str) -> str | None:
    number = _digits(text)
    if 13 <= len(number) <= 19 and number[0] in "23456" and _luhn(number):
        return number
    return None


def _iban(text: str) -> str | None:
    iban = text.replace(" ", "")
    if not 15 <= len(iban) <= 34:
        return None
    rearranged = iban[4:] + iban[:4]
    return iban if int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1 else None


def _phone(text: str) -> str | None:
    number = _digits(text)
    if text.startswith("+"):
        return "+" + number if 8 <= len(number) <= 15 else None
    return number if 10 <= len(number) <= 11 else None


def _ip(text: str) -> str | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if address.version == 6 and len([g for g in text.split(":") if g]) < 3:
        return None  # "::1"-like fragments and times such as "10:30" are not worth the false positives
    return address.compressed


def _ssn(text: str) -> str | None:
    area, group, serial = text.split("-")
    if area in ("000", "666") or area.startswith("9") or group == "00" or serial == "0000":
        return None  # never issued
    return area + group + serial


_HAS_DIGIT = re.compile(r"\d")


def _has_digit(text: str) -> bool:
    return _HAS_DIGIT.search(text) is not None


def _may_hold_ipv6(text: str) -> bool:
    return "::" in text or text.count(":") >= 7


@dataclass(frozen=True)
class Detector:
    label: str  # the placeholder's name
    pattern: re.Pattern[str]
    canonical: Callable[[str], str | None]  # the value to number by, or None when the match is not really one
    worth_scanning: Callable[[str], bool]  # a cheap test that rules most texts out before the regex runs


_NOT_AFTER_DIGITS = r"(?![\w-]|\.\d)"  # not followed by more of an identifier (or a decimal part)
# Patterns start with the character they consume, the boundary check after it: the regex engine then skips ahead
# to candidate characters instead of trying a look-behind at every position.
#: In priority order: an e-mail address can hold digits, a card number can look like a phone number.
DETECTORS = (
    Detector("EMAIL", re.compile(r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
                                 r"\.[A-Za-z]{2,}(?![\w-])"), str.lower, lambda text: "@" in text),
    Detector("IBAN", re.compile(r"[A-Z](?<![\w-][A-Z])[A-Z]\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![\w-])"),
             _iban, _has_digit),
    Detector("CARD", re.compile(r"\d(?<![\w-]\d)(?:[ -]?\d){12,18}" + _NOT_AFTER_DIGITS), _card, _has_digit),
    Detector("SSN", re.compile(r"\d(?<![\w-]\d)\d{2}-\d{2}-\d{4}" + _NOT_AFTER_DIGITS), _ssn, _has_digit),
    Detector("PHONE", re.compile(r"(?=[+(\d])(?<![\w+-])(?:\+(?:\d[ .()-]{0,2}){7,14}\d|(?:\+?1[ .-]?)?"
                                 r"(?:\(\d{3}\) ?|\d{3}[ .-])\d{3}[ .-]\d{4})" + _NOT_AFTER_DIGITS),
             _phone, _has_digit),
    Detector("IP", re.compile(r"\d(?<![\w.]\d)\d{0,2}(?:\.\d{1,3}){3}" + _NOT_AFTER_DIGITS), _ip, _has_digit),
    Detector("IP", re.compile(r"(?<![\w:.])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])"), _ip,
             _may_hold_ipv6),
)

#: Digests of long texts found clean. Logs repeat long texts (system prompts, policies) in every conversation;
#: scanning each once is most of the saving. Bounded, and holding digests, not the texts.
_CLEAN_TEXTS: OrderedDict[bytes, None] = OrderedDict()
_CLEAN_TEXTS_MAX = 4096
_CLEAN_TEXT_MIN_CHARS = 512


class Redactor:
    """Redacts one conversation: numbers each distinct value per label in order of first appearance."""

    def __init__(self) -> None:
        self._placeholders: dict[tuple[str, str], str] = {}
        self._used: Counter[str] = Counter()
        self.counts: Counter[str] = Counter()  # replacements made, by label

    def text(self, text: str) -> str:
        key = None
        if len(text) >= _CLEAN_TEXT_MIN_CHARS:
            key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
            if key in _CLEAN_TEXTS:
                _CLEAN_TEXTS.move_to_end(key)
                return text
        original = text
        for detector in DETECTORS:
            if detector.worth_scanning(text):
                text = detector.pattern.sub(lambda m, d=detector: self._replace(d, m.group()), text)
        if key is not None and text == original:
            _CLEAN_TEXTS[key] = None
            if len(_CLEAN_TEXTS) > _CLEAN_TEXTS_MAX:
                _CLEAN_TEXTS.popitem(last=False)
        return text

    def value(self, value: Any) -> Any:
        """Redact every string in a JSON value; a number shaped like a card or phone number becomes a placeholder
        string too."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, int) and not isinstance(value, bool):
            redacted = self.text(str(value))
            return value if redacted == str(value) else redacted
        return value

    def json_text(self, text: str) -> str:
        """A string that may hold JSON (tool arguments, tool results). Redacted in place, keeping its exact form,
        unless that would break its JSON (a card number logged as a bare number): then redacted as data and
        re-serialised."""
        counted = self.counts.copy()
        redacted = self.text(text)
        if redacted == text or _is_json(redacted) or not _is_json(text):
            return redacted
        text_counts, self.counts = self.counts, counted  # the structural pass counts the same replacements again
        try:
            return orjson.dumps(self.value(orjson.loads(text))).decode()
        except (TypeError, RecursionError):  # nested deeper than orjson writes (254) or than Python recurses
            self.counts = text_counts
            return redacted  # redacted, though no longer JSON: personal data never survives to keep a form

    def _replace(self, detector: Detector, found: str) -> str:
        canonical = detector.canonical(found)
        if canonical is None:
            return found
        key = (detector.label, canonical)
        placeholder = self._placeholders.get(key)
        if placeholder is None:
            self._used[detector.label] += 1
            placeholder = self._placeholders[key] = f"<{detector.label}_{self._used[detector.label]}>"
        self.counts[detector.label] += 1
        return placeholder


def _is_json(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


# Keys that name or link things rather than say them: never redacted.
_STRUCTURAL_KEYS = ("role", "tool_call_id", "name", "tool_calls")


def redact_conversation(conversation: dict[str, Any]) -> Counter[str]:
    """Redact a transcript in place: message contents (and any other text a message carries), tool-call arguments,
    tool results, and the metadata (so expected tool calls stay comparable with the redacted calls). Tool schemas,
    ids and names are left alone. Returns the replacements made, by label."""
    redactor = Redactor()
    for message in conversation.get("messages") or ():
        for key, value in message.items():
            if key == "content" and isinstance(value, str):
                message[key] = redactor.json_text(value)
            elif key not in _STRUCTURAL_KEYS:
                message[key] = redactor.value(value)
        for call in message.get("tool_calls") or ():
            function = call.get("function")
            if isinstance(function, dict) and "arguments" in function:
                arguments = function["arguments"]
                function["arguments"] = (redactor.json_text(arguments) if isinstance(arguments, str)
                                         else redactor.value(arguments))
    if "metadata" in conversation:
        conversation["metadata"] = redactor.value(conversation["metadata"])
    return redactor.counts
