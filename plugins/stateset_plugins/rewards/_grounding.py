"""Values a conversation mentions, and whether a reply's values are grounded in what came before it.

A support agent's facts (amounts, dates, times, ids and codes, names) should come from somewhere: the user said
them, a tool returned them, or the system prompt holds them. A value that appears nowhere before the turn was
invented (or belongs to another conversation). Values are canonical strings, so "$1,250.00" and "1250" agree, and
so do "May 20th" and "2024-05-20":

* `n:1250`       a number (thousands separators, currency signs and trailing zeros ignored)
* `d:05-20`      a calendar date, month and day (a year, when written, also counts as a number)
* `t:15:00`      a time of day, 24-hour
* `id:hat001`    a code: a token mixing letters and digits, or a capitalised code of three letters or more that is no
                 English word ("JFK")
* `name:mia`     a capitalised word that is no English word (a person, a place)

Small whole numbers (0-10: counts, list numbering) are never judged: they need no source. A number the agent worked
out from grounded numbers the same reply states (a sum or difference of two, or 2-9 times one) is "derived": half
credit, since the arithmetic is legitimate but unchecked. A four-digit number matching the last digits of a longer one is grounded:
cards and accounts are named by their last four digits.

A date a shift the user spoke of ("the next day", "two days later") away from a grounded date is grounded too
(`_relative_days`). A value is looked for in the context's text (lower-cased, in the grounding roles) in each of its
written forms, on token boundaries; nothing is parsed until a reply states a value, so grading stays cheap.

Helpers for any reward: `mentioned_values(text)`, `context_values(messages, before)`, `ungrounded(values, context)`,
and `GroundingIndex` (one conversation, every turn: the context text is built once, incrementally).
"""
from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

from stateset_agents.plugin_api.text import message_text

from ._language import known_word
from ._relative_days import day_shifts, shifted_dates

#: Roles whose messages ground a value: the user's words, tool results, the system prompt.
GROUNDING_ROLES = frozenset({"user", "tool", "system"})
#: Whole numbers up to this need no source (counts, list numbering, "2 bags").
SMALL_NUMBER = 10

_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
                "november", "december")
_MONTHS = {name: i for i, name in enumerate(_MONTH_NAMES, start=1)}
_MONTHS.update({name[:3]: i for i, name in enumerate(_MONTH_NAMES, start=1)})
_MONTHS["sept"] = 9
_MONTH_PREFIXES = tuple(name[:3] for name in _MONTH_NAMES)
_CALENDAR_WORDS = frozenset(_MONTHS) | {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_MONTH_DAY = re.compile(rf"(?i)(?=[a-z0-9])\b(?:({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?|(\d{{1,2}})(?:st|nd|rd|th)?\s+"
                        rf"(?:of\s+)?({_MONTH}))\b")
# Digit-led values: an ISO date (with a time), a clock time (with am/pm), a number. Ids are found among the tokens.
_DIGIT_VALUE = re.compile(r"(?=\d)(?:\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2})?|\d{1,2}:\d{2}(?:\s*[AaPp]\.?[Mm]\b)?"
                          r"|\d{1,2}\s*[AaPp]\.?[Mm]\b|\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)")
_TOKEN = re.compile(r"\w+")
_UNIT = re.compile(r"(?i)^(\d+)(?:st|nd|rd|th|k|kg|kgs|lb|lbs|h|hr|hrs|min|mins|x|s|pm|am|gb|mb)$")
_CLOCK_JOIN = re.compile(r"^\d+T\d+$")  # "2024-05-20T15:00" splits into \w+ tokens as "20T15": no id
_MERIDIEM = re.compile(r"(?i)([ap])\.?m\b")


def _number_key(text: str) -> str | None:
    text = text.replace(",", "")
    if text.isdigit():
        value: int | Fraction = int(text)
    else:
        whole, dot, decimals = text.partition(".")
        try:
            if dot and whole.isdecimal() and decimals.isdecimal():
                # "12.50": the Fraction of its digits (what Fraction("12.50") gives, without parsing the text)
                decimals = decimals.rstrip("0")
                value = Fraction(int(whole + decimals), 10 ** len(decimals)) if decimals else int(whole)
            else:
                value = Fraction(text)
        except (ValueError, ZeroDivisionError):
            return None
        if value.denominator == 1:
            value = int(value)
    if isinstance(value, int) and 0 <= value <= SMALL_NUMBER:
        return None
    return f"n:{value}"


def _clock(hour: int, minute: int, meridiem: str | None) -> str | None:
    if meridiem:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if meridiem.lower() == "p" else 0)
    return f"t:{hour:02d}:{minute:02d}" if hour < 24 and minute < 60 else None


def mentioned_values(text: str, tokens: Sequence[str] | None = None,
                     lowered: frozenset[str] | None = None) -> list[str]:
    """The canonical values a text mentions (see the module docstring). `tokens`: the text's `\\w+` tokens in their
    own case and `lowered`: the set of them lower-cased, when the caller has them."""
    out: list[str] = []
    if tokens is None:
        tokens = _TOKEN.findall(text)
    if lowered is None:
        lowered = frozenset(map(str.lower, tokens))
    first_digit = _HAS_DIGIT(text)
    if first_digit:
        plan: list[tuple] = []
        days: set[int] = set()  # where a date's day is written ("May 20"): not a number of its own
        if not lowered.isdisjoint(_CALENDAR_WORDS):  # a date needs its day's digits ("you may" has none)
            _month_days(text, plan, days)
        _digit_plan(text, plan, days, first_digit.start())
        out += _values(plan, text)
    # Tokens with a capital letter (a token not among the lower-cased ones) that are no English word: codes ("JFK")
    # and names ("Mia"). Found with set operations first: most replies' capitalised words are English ("Your").
    unknown = [t for t in frozenset(tokens).difference(lowered)
               if len(t) >= 3 and t.isalpha() and t.lower() not in _CALENDAR_WORDS and not known_word(t.lower())]
    if unknown:
        unknown_set = frozenset(unknown)
        # in the order written (a set's order changes with the process's string hashing, and so would the reasons)
        for token in dict.fromkeys(tokens):
            if token in unknown_set:
                word = token.lower()
                if token.isupper():
                    if len(token) <= 10:
                        out.append("id:" + word)
                elif token[1:].islower():
                    out.append("name:" + word)
    return out


_HAS_DIGIT = re.compile(r"\d").search


def _month_days(text: str, plan: list[tuple], days: set[int]) -> None:
    """The dates written with a month's name ("May 20th", "4 of July") into `plan`; where each day's digits start
    into `days` (they are no number of their own)."""
    for match in _MONTH_DAY.finditer(text):
        month = _MONTHS[(match.group(1) or match.group(4)).lower()]
        day = 2 if match.group(2) else 3
        days.add(match.start(day))
        plan.append((_MONTH_DAY_VALUE, match.start(day), match.end(day), month))


def digit_values(text: str, text_wording: bytes | None = None) -> list[str]:
    """The values of `mentioned_values` that are written with digits (numbers, amounts, dates, times, ids such as
    "HAT001"), without reading the text's words: a text with no digit costs one search. Capitalised codes and
    names written without digits ("JFK", "Mia") are left out. `text_wording`: its `wording`, when the caller has it."""
    if text_wording is None:
        if not _HAS_DIGIT(text):
            return []
        text_wording = wording(text)
    elif b"0" not in text_wording:  # no ASCII digit (each is "0" in the wording, and a UTF-8 "0" is only that)
        if text_wording.isascii() or not _HAS_DIGIT(text):  # (another digit only in a non-ASCII text)
            return []
    # Where a text's values are and how each is read depends only on which of its characters are digits, never on
    # which digits they are (every pattern here says \d, never a particular digit): texts that differ only in
    # their ASCII digits ("refund of $149.00 (reference RF-438995)") share a plan, found once per wording.
    return _values(_wording_plan(text_wording), text)


_ZERO_DIGITS = bytes.maketrans(b"123456789", b"000000000")


def wording(text: str) -> bytes:
    """A key shared by the texts that differ only in their ASCII digits: the text with each of them made 0 (in
    UTF-8, where a byte below 128 is always that character, and surrogates kept; decode it likewise)."""
    return text.encode("utf-8", "surrogatepass").translate(_ZERO_DIGITS)


@lru_cache(maxsize=4096)
def _wording_plan(text_wording: bytes) -> tuple[tuple, ...]:
    """The `_month_days` and `_digit_plan` plan of the texts of one `wording`."""
    text = text_wording.decode("utf-8", "surrogatepass")
    plan: list[tuple] = []
    days: set[int] = set()
    # Every month name starts with its three-letter abbreviation: substring tests are far cheaper than the pattern.
    lowered = text.lower()
    if any(m in lowered for m in _MONTH_PREFIXES):
        _month_days(text, plan, days)
    _digit_plan(text, plan, days, _HAS_DIGIT(text).start())
    return tuple(plan)


_WORD_BEFORE = re.compile(r"\w+$")
_WORD_AFTER = re.compile(r"\w*")
# How a planned stretch of text is read (`_values`).
_MONTH_DAY_VALUE, _UNIT_NUMBER, _ID, _ISO_DATE_TIME, _CLOCK, _WHOLE, _NUMBER = range(7)


def _digit_plan(text: str, plan: list[tuple], days: set[int], first_digit: int = 0) -> None:
    """Where the digit-led values are in `text`, and how each is read, into `plan` as (how, start, end): what the
    text's digits are is left to `_values`."""
    # Every value starts with a digit: the scan starts at the first one (the pattern looks at nothing before it).
    for match in _DIGIT_VALUE.finditer(text, first_digit):
        start, end = match.span()
        if start in days:
            continue
        token = match.group(0)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if before == "." or (before.isdigit()):
            continue  # a decimal's fraction
        if before.isalnum() or before == "_" or ((after.isalpha() or after == "_") and "-" not in token):
            # Digits inside a word: the whole word is a code or an id ("HAT001", "mia_li_3668"), unless it is a
            # number with its unit ("20th", "50kg").
            head = _WORD_BEFORE.search(text, max(0, start - 64), start)
            word_start = head.start() if head else start
            word_end = _WORD_AFTER.match(text, end).end()
            unit = _UNIT.match(text[word_start:word_end])
            if unit:
                plan.append((_UNIT_NUMBER, word_start, word_start + unit.end(1)))
            elif not _CLOCK_JOIN.match(text[word_start:word_end]):
                plan.append((_ID, word_start, word_end))
        elif "-" in token:
            plan.append((_ISO_DATE_TIME, start, end))
        elif ":" in token or token[-1] in "mM":
            plan.append((_CLOCK, start, end))
        elif token.isdigit():  # the common case, as `_number_key` reads it
            plan.append((_WHOLE, start, end))
        else:
            plan.append((_NUMBER, start, end))


def _values(plan: Sequence[tuple], text: str) -> list[str]:
    """The values a `_digit_plan` (or `_month_days`) plan finds in `text`: what its digits say."""
    out: list[str] = []
    for step in plan:
        how, token = step[0], text[step[1]:step[2]]
        key = None
        if how == _WHOLE:
            value = int(token)
            key = f"n:{value}" if value > SMALL_NUMBER else None
        elif how == _ID:
            key = "id:" + token.lower()
        elif how == _MONTH_DAY_VALUE:
            day = int(token)
            if 1 <= day <= 31:
                key = f"d:{step[3]:02d}-{day:02d}"
        elif how == _UNIT_NUMBER or how == _NUMBER:
            key = _number_key(token)
        elif how == _ISO_DATE_TIME:
            year, month, rest = token.split("-", 2)
            day, _, clock = rest.replace("T", " ").partition(" ")
            out.append(f"n:{int(year)}")
            if 1 <= int(month) <= 12 and 1 <= int(day) <= 31:
                out.append(f"d:{int(month):02d}-{int(day):02d}")
            if clock:
                hour, minute = clock.split(":")
                key = _clock(int(hour), int(minute), None)
        else:  # _CLOCK
            meridiem = _MERIDIEM.search(token)
            digits = re.findall(r"\d+", token)
            key = _clock(int(digits[0]), int(digits[1]) if len(digits) > 1 else 0,
                         meridiem.group(1) if meridiem else None)
        if key:
            out.append(key)
    return out


def _occurs(needle: str, haystack: str, digits: bool, tail_digits: bool = False, start: int = 0,
            end: int | None = None) -> int:
    """Where `needle` first occurs in `haystack[start:end]` on token boundaries (the end of that occurrence), or -1.
    For a number (`digits`): no digit or decimal point before it (unless `tail_digits`: the last digits of a longer
    number, or an ISO date's "-MM-DD" after its year), and after it no digit, nor a decimal part other than zeros.
    For a word or code: no letter or digit on either side (an underscore separates)."""
    if end is None:
        end = len(haystack)
    size = len(needle)
    at = haystack.find(needle, start, end)
    while at >= 0:
        before = haystack[at - 1] if at else " "
        stop = at + size
        after = haystack[stop] if stop < len(haystack) else " "
        if digits:
            ok = tail_digits or not (before.isdigit() or before == ".")
            if ok and after == "." and stop + 1 < len(haystack) and haystack[stop + 1].isdigit():
                fraction = _FRACTION.match(haystack, stop).group(0)
                ok = "." not in needle and not fraction.strip(".0")
            elif ok and after.isdigit():
                # "312.4" is written "312.40" too: a decimal may go on in zeros, nothing else
                ok = "." in needle and not _DIGIT_RUN.match(haystack, stop).group(0).strip("0")
        else:
            ok = not before.isalnum() and not after.isalnum()
        if ok:
            return stop
        at = haystack.find(needle, at + 1, end)
    return -1


_FRACTION = re.compile(r"\.\d+")
_DIGIT_RUN = re.compile(r"\d+")


@lru_cache(maxsize=4096)
def _number(body: str) -> int | Fraction:
    """A canonical number's body as an exact value: an int when it is whole (ints and Fractions compare and hash
    alike, and int arithmetic is many times faster)."""
    if body.isascii() and body.isdigit():
        return int(body)
    number = Fraction(body)
    return int(number) if number.denominator == 1 else number


def _forms(value: str) -> list[tuple[str, bool | str]]:
    """The ways a canonical value may be written in a (lower-cased) context: (text, True for a number, or "tail"
    for one that may follow other digits)."""
    if value[1:2] != ":" or value[0] not in "ndt":  # an id or a name: written as it is (and rarely seen twice)
        return [(value.partition(":")[2], False)]
    return _spelled(value)


@lru_cache(maxsize=4096)
def _spelled(value: str) -> list[tuple[str, bool | str]]:
    kind, _, body = value.partition(":")
    if kind == "n":
        number = _number(body)
        if type(number) is int:
            whole = int(number)
            forms = [(str(whole), True)]
            if abs(whole) >= 1000:
                forms.append((f"{whole:,}", True))
            return forms
        text = f"{float(number):f}".rstrip("0")
        return [(text, True), (f"{float(number):,f}".rstrip("0"), True)]
    if kind == "d":
        month, day = int(body[:2]), int(body[3:])
        name = _MONTH_NAMES[month - 1]
        return [(f"-{month:02d}-{day:02d}", "tail"), (f"{name} {day}", True), (f"{name[:3]} {day}", True),
                (f"{day} {name[:3]}", False)]
    if kind == "t":
        hour, minute = int(body[:2]), int(body[3:])
        twelve = hour % 12 or 12
        meridiem = "pm" if hour >= 12 else "am"
        forms = [(f"{hour:02d}:{minute:02d}", True), (f"{twelve}:{minute:02d}", True)]
        if minute == 0:
            forms.append((f"{twelve} {meridiem}", False))
        return forms
    return [(body, False)]


def readable(value: str) -> str:
    """A canonical value as a reason shows it: a number as it is written ("312.4", not "1562/5"), else its body."""
    if value.startswith("n:"):
        return _spelled(value)[0][0]
    return value.partition(":")[2]


def first_grounding(value: str, text: str, start: int, end: int) -> int:
    """The end of the first occurrence of any written form of `value` in `text[start:end]`, or -1."""
    body = value[2:]
    if value[:2] == "n:" and body.isdigit() and body.isascii() and (body[0] != "0" or len(body) == 1):
        # A whole number as `_spelled` writes it (most values are): its digits, and from 1,000 on with separators
        # too, searched without building the forms. Four digits may be the last of a longer number.
        best = _occurs(body, text, True, len(body) == 4, start, end)
        if len(body) > 3:
            # The separated form can only come first if it ends before the plain one does (the two never end at
            # the same place: the plain one's last characters are digits where the other has a separator).
            # f"{int(body):,}", which for up to six digits (no leading zero) is one comma before the last three
            separated = body[:-3] + "," + body[-3:] if len(body) <= 6 else f"{int(body):,}"
            stop = end if best < 0 else best
            if text.find(separated, start, stop) >= 0:  # rarely written so: look before judging the boundaries
                found = _occurs(separated, text, True, False, start, stop)
                if found >= 0:
                    best = found
        return best
    if value[1:2] != ":" or value[0] not in "ndt":  # an id or a name: one form, as written
        return _occurs(value.partition(":")[2], text, False, False, start, end)
    last_four = value.startswith("n:") and len(value) == 6 and value[2:].isdigit()
    best = -1
    for form, digits in _forms(value):
        found = _occurs(form, text, bool(digits), digits == "tail" or (last_four and form.isdigit()), start, end)
        if found >= 0 and (best < 0 or found < best):
            best = found
    return best


class Context:
    """What grounds a value: the lower-cased text of the grounding messages. `value in context` tests one."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __contains__(self, value: str) -> bool:
        return first_grounding(value, self.text, 0, len(self.text)) >= 0


def context_values(messages: Sequence[Mapping[str, Any]], before: int,
                   roles: Iterable[str] = GROUNDING_ROLES) -> Context:
    """The context that grounds the values of the message at `before`: the earlier messages in `roles`."""
    roles = frozenset(roles)
    return Context("\n".join(message_text(m).lower() for m in messages[:before] if m.get("role") in roles))


def ungrounded(values: Iterable[str], context: Context) -> list[str]:
    """The values found nowhere in the context (a derived number counts as ungrounded here; see `derived`)."""
    return [v for v in values if v not in context]


class GroundingIndex:
    """One conversation, indexed once for all its turns. The grounding messages' text grows as turns advance; each
    value is searched for once, and after that only in text added since (a value stays grounded once it is)."""

    __slots__ = ("messages", "roles", "_text", "_ends", "_indexed_to", "_found", "_scanned")

    def __init__(self, messages: Sequence[Mapping[str, Any]], roles: Iterable[str] = GROUNDING_ROLES):
        self.messages = messages
        self.roles = roles if type(roles) is frozenset else frozenset(roles)
        self._text = ""
        self._ends = [0]  # _ends[i]: length of the text that the messages before index i make
        self._indexed_to = 0
        self._found: dict[str, int] = {}    # value -> end of its first grounding occurrence in the text
        self._scanned: dict[str, int] = {}  # value (not found yet) -> how much of the text has been searched

    def _context_end(self, before: int) -> int:
        if before < len(self._ends):
            return self._ends[before]
        before = min(before, len(self.messages))
        pieces = []
        length = len(self._text)
        roles, ends = self.roles, self._ends
        for message in self.messages[self._indexed_to:before]:
            if message.get("role") in roles:
                piece = message_text(message).lower()
                pieces.append(piece)
                length += len(piece) + 1
            ends.append(length)
        if pieces:
            pieces.append("")  # each piece ends in a newline
            self._text += "\n".join(pieces)
        self._indexed_to = before
        return ends[before]

    def grounded(self, value: str, before: int) -> bool:
        return self._grounded(value, self._context_end(before))

    def _grounded(self, value: str, end: int) -> bool:
        found = self._found.get(value)
        if found is None:
            scanned = self._scanned.get(value, 0)
            if scanned < end:
                # Forms are short: restart a little before the last stop so none is missed across it.
                hit = first_grounding(value, self._text, max(0, scanned - 32), end)
                if hit >= 0:
                    self._found[value] = found = hit
                else:
                    self._scanned[value] = end
        return found is not None and found <= end

    def context(self, before: int) -> Context:
        end = self._context_end(before)  # first: it extends the text the slice reads
        return Context(self._text[:end])

    def credit(self, values: Iterable[str], before: int) -> tuple[float, list[str]]:
        """Mean credit over distinct values (1 grounded, 0.5 derived, 0 invented) and the invented ones."""
        distinct = list(dict.fromkeys(values))
        if not distinct:
            return 1.0, []
        end = self._context_end(before)
        grounded = [v for v in distinct if self._grounded(v, end)]
        total = float(len(grounded))
        invented = []
        if len(grounded) < len(distinct):
            known = {_number(v[2:]) for v in grounded if v.startswith("n:")}
            grounded_set = set(grounded)
            for value in distinct:
                if value not in grounded_set:
                    if value.startswith("n:") and derived(_number(value[2:]), known):
                        total += 0.5
                    elif value.startswith("d:") and self._shifted_from_context(value, before, end):
                        total += 1.0
                    else:
                        invented.append(value)
        return total / len(distinct), invented

    def _shifted_from_context(self, value: str, before: int, end: int) -> bool:
        """Is a date (`d:MM-DD`) a shift the user spoke of ("the next day") away from a grounded date?"""
        said = " ".join(message_text(m).lower() for m in self.messages[:before] if m.get("role") == "user")
        shifts = day_shifts(said)
        if not shifts:
            return False
        # Month and day only: a leap year lets 02-29 move too; the year a date is written with is its own value.
        return any(self._grounded(f"d:{moved[5:]}", end) for moved in shifted_dates(f"2024-{value[2:]}", shifts))


def derived(number: Fraction | int, known: set[Fraction] | set[int]) -> bool:
    """Is a number the reply states worked out from grounded numbers it also states: a sum or difference of two,
    or 2-9 times one ("2 bags at $50: $100")? Exact arithmetic throughout (whole numbers as ints: faster)."""
    if not known:
        return False
    if type(number) is int:
        # number / k, exactly: an int when k divides it, else the Fraction (which only a non-whole known can equal)
        fractional = None
        for k in range(2, 10):
            if number % k == 0:
                if number // k in known:
                    return True
            else:
                if fractional is None:
                    fractional = any(type(v) is not int for v in known)
                if fractional and Fraction(number, k) in known:
                    return True
    elif any(number / k in known for k in range(2, 10)):
        return True
    return any((number - v) in known or (v - number) in known for v in known)
