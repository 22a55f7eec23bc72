"""What `tool_calling` reads from the conversation itself: are a call's argument values grounded in what the user
said or a tool returned, did the user give the go-ahead for a write, and does a text reply claim a change that no
call made. Shared by both of its modes (with and without expected calls); see docs/rewards.md, "tool_calling". Its
reading of a claimed or promised change (`claim_reading`) is also how `customer_support` and `nsr` read one.

Everything here reads the prefix (`messages[:turn]`) plus, as documented, a call's own result (did it error?).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable

import orjson

from stateset_agents.plugin_api.text import message_text

from ._grounding import digit_values, wording
from ._relative_days import day_shifts, shifted_dates
from ._text import (AFFIRM, NEGATE, Phrases, affirmed, is_error_result, parse_arguments, phrases, tool_calls,
                    tool_result)

# A string of more than this many words is prose (a summary, a note), not a value to look for in the context.
PROSE_WORDS = 8
# Integers below this are counts (bags, passengers, nights) the agent derives by counting, not values it copies.
SMALL_COUNT = 10

# The user's explicit go-ahead (`_text.AFFIRM`; a `NEGATE` word before it cancels it), compiled once.
_YES, _NO = phrases(AFFIRM), phrases(NEGATE)

# Verbs of changing something for the user: (base, past participle, -ing). A claim names one of these.
_CHANGE_VERBS = (
    ("change", "changed", "changing"), ("update", "updated", "updating"), ("modify", "modified", "modifying"),
    ("cancel", "cancelled", "cancelling"), ("cancel", "canceled", "canceling"), ("book", "booked", "booking"),
    ("rebook", "rebooked", "rebooking"),
    ("reserve", "reserved", "reserving"), ("refund", "refunded", "refunding"), ("issue", "issued", "issuing"),
    ("process", "processed", "processing"), ("add", "added", "adding"), ("remove", "removed", "removing"),
    ("delete", "deleted", "deleting"), ("upgrade", "upgraded", "upgrading"), ("downgrade", "downgraded", "downgrading"),
    ("switch", "switched", "switching"), ("reschedule", "rescheduled", "rescheduling"), ("send", "sent", "sending"),
    ("submit", "submitted", "submitting"), ("place", "placed", "placing"), ("apply", "applied", "applying"),
    ("transfer", "transferred", "transferring"), ("move", "moved", "moving"), ("replace", "replaced", "replacing"),
    ("reset", "reset", "resetting"), ("credit", "credited", "crediting"), ("charge", "charged", "charging"),
    ("waive", "waived", "waiving"), ("edit", "edited", "editing"), ("correct", "corrected", "correcting"),
    ("exchange", "exchanged", "exchanging"), ("reimburse", "reimbursed", "reimbursing"),
    ("schedule", "scheduled", "scheduling"), ("file", "filed", "filing"), ("close", "closed", "closing"),
    ("create", "created", "creating"), ("pay", "paid", "paying"), ("open", "opened", "opening"),
    ("register", "registered", "registering"), ("assign", "assigned", "assigning"),
    ("approve", "approved", "approving"), ("renew", "renewed", "renewing"), ("activate", "activated", "activating"),
    ("deactivate", "deactivated", "deactivating"), ("freeze", "frozen", "freezing"),
    ("unfreeze", "unfrozen", "unfreezing"),
    ("return", "returned", "returning"),
)
_BASES = frozenset(v[0] for v in _CHANGE_VERBS)
_PASTS = frozenset(v[1] for v in _CHANGE_VERBS)
_INGS = frozenset(v[2] for v in _CHANGE_VERBS)
_VERB_FORMS = _BASES | _PASTS | _INGS
_TOKEN = re.compile(r"[a-z0-9']+|[.!?;:\n]")
_PUNCTUATION = frozenset(".!?;:\n")
# Done: "has been cancelled", "I've updated", "I have booked", "I cancelled", "successfully refunded", "is now
# changed", "is changed now", "was updated for you" (a bare "is booked" often describes a record the agent read).
# Promised: "I'll change", "I will make sure to update", "I'm cancelling", "we are going to refund", "let me book".
_ADVERBS = frozenset(("now", "also", "just", "successfully"))
_AHEAD = (("went", "ahead", "and"), ("gone", "ahead", "and"))
_FILLERS = frozenset(("now", "also", "be"))
_ON_THE_WAY = (("go", "ahead", "and"), ("proceed", "to"), ("make", "sure", "to"))
_PASSIVE_FOLLOW = (("successfully",), ("just", "now"), ("for", "you"), ("on", "your", "behalf"), ("as", "requested"),
                   ("as", "you", "asked"))
_FIRST_PERSON = frozenset(("i", "we", "i've", "we've"))
_FUTURE = (("i'll",), ("we'll",), ("i", "will"), ("we", "will"), ("i", "shall"), ("we", "shall"))
_PRESENT = (("i'm",), ("we're",), ("i", "am"), ("we", "are"))


def _strip(tail: list[str], singles: frozenset[str], phrases: tuple[tuple[str, ...], ...]) -> list[str]:
    """`tail` without the adverbs (words or phrases) it ends with."""
    while tail:
        if tail[-1] in singles:
            tail = tail[:-1]
            continue
        phrase = next((p for p in phrases if tuple(tail[-len(p):]) == p), None)
        if phrase is None:
            return tail
        tail = tail[:-len(phrase)]
    return tail


def _ends(tail: list[str], endings: tuple[tuple[str, ...], ...]) -> bool:
    return any(tuple(tail[-len(e):]) == e for e in endings)


def _done_at(tokens: list[str], at: int, lead: list[str]) -> bool:
    """Does the past participle at `at` complete a claim of a change made ("has been", "I have", "I")?"""
    if "already" in lead[-3:]:
        return False  # "has already been cancelled" describes what the agent found
    if lead[-1:] == ["successfully"] or _ends(lead, (("is", "now"), ("are", "now"))):
        return True
    tail = _strip(lead, _ADVERBS, _AHEAD)
    if tail[-1:] == ["been"]:
        return _strip(tail[:-1], _ADVERBS, ())[-1:] in (["has"], ["have"], ["i've"], ["we've"])
    if tail[-1:] and (tail[-1] in _FIRST_PERSON or _ends(tail, (("i", "have"), ("we", "have")))):
        return True
    if tail[-1:] in (["was"], ["were"]):
        return any(tuple(tokens[at + 1:at + 1 + len(f)]) == f for f in _PASSIVE_FOLLOW)
    return tail[-1:] in (["is"], ["are"]) and tokens[at + 1:at + 2] == ["now"]  # "is updated now"


def _promised_at(token: str, lead: list[str]) -> bool:
    """Does the verb complete a promise to make a change ("I'll change", "I'm cancelling", "let me book")?"""
    tail = _strip(lead, _FILLERS, _ON_THE_WAY)
    if token in _BASES and (_ends(tail, _FUTURE + (("let", "me"),)) or (
            tail[-2:] == ["going", "to"] and _ends(tail[:-2], _PRESENT))):
        return True
    return token in _INGS and _ends(tail, _PRESENT + _FUTURE)


# A message that asks for the go-ahead proposes a change: what it promises is not yet a claim.
_ASKS_GO_AHEAD = Phrases(("confirm", "proceed", "go ahead", "would you like me to", "do you want me to", "shall i",
                          "should i", "is that correct", "is this correct", "is that right", "yes/no", "(yes)",
                          "let me know if you'd like me to", "let me know if you want me to", "reply yes"))
_ARITHMETIC = re.compile(r"[\d\s.+\-*/()%]+")
_OPERATOR = re.compile(r"[+*/%()]| - ")  # a bare hyphen joins a date or a phone number
_OPERAND = re.compile(r"\d+(?:\.\d+)?")
_NUMBER_TEXT = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_ISO_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_ORDINAL = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}


# Words that make the clause they open a condition or a time, not an assertion ("once they have been added").
_SUBORDINATE = frozenset(("once", "if", "when", "whenever", "after", "before", "until", "unless", "whether",
                          "can", "cannot", "can't", "could", "may", "might", "should", "would", "not", "never"))


def claims_change(text: str, acting: bool = False) -> bool:
    """Does a reply say that a change was made, or promise one without asking for the go-ahead? A promise in a
    message that also makes a call (`acting`) is a plan being carried out, not an empty promise. A clause opened
    by a condition, a modal or a negation ("once they have been added", "cannot be changed") asserts nothing."""
    # No word or phrase read here holds a digit, and a digit is a word character like any other: texts that
    # differ only in their digits (amounts, ids) claim alike, and are read once per wording.
    return _wording_claims(wording(text), acting)


def _wording_claims(text_wording: bytes, acting: bool) -> bool:
    done, promised = _wording_reading(text_wording)
    return bool(done) or (not acting and bool(promised))


def claim_reading(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(the changes a reply says were made, the changes it promises without asking for the go-ahead), each as the
    base forms of their verbs: "I've cancelled it and I'll refund you" -> ({"cancel"}, {"refund"}). What
    `claims_change` reads, with the verbs it read."""
    return _wording_reading(wording(text))


# Words that, after a promised verb in its clause, make the promise wait on something ("... when it arrives").
_CONDITIONS = frozenset(("when", "once", "if", "unless", "whenever"))
_BASE_OF = {form: base for base, past, ing in _CHANGE_VERBS for form in (base, past, ing)}


@lru_cache(maxsize=4096)
def _wording_reading(text_wording: bytes) -> tuple[frozenset[str], frozenset[str]]:
    text = text_wording.decode("utf-8", "surrogatepass")
    done: set[str] = set()
    promised: set[str] = set()
    for words, at in _asserted_verbs(text):
        token, lead = words[at], words[:at]
        if token in _PASTS and _done_at(words, at, lead):
            done.add(_BASE_OF[token])
        elif _promised_at(token, lead) and _CONDITIONS.isdisjoint(words[at + 1:]):
            promised.add(_BASE_OF[token])  # "we'll refund it when it comes back" promises nothing for now
    if promised and _ASKS_GO_AHEAD.search(text):
        promised.clear()  # a message that asks for the go-ahead proposes: its promises are not yet claims
    return frozenset(done), frozenset(promised)


def _asserted_verbs(text: str) -> Iterator[tuple[list[str], int]]:
    """Each change verb of the text that a clause asserts, in order: (its clause's lower-cased words, its place);
    none under a condition, modal or negation opening the six words before it."""
    for words in _clauses(text.lower().replace("\u2019", "'")):
        if _VERB_FORMS.isdisjoint(words):
            continue
        for at in [at for at, word in enumerate(words) if word in _VERB_FORMS]:  # only the verbs, in order
            if _SUBORDINATE.isdisjoint(words[max(0, at - 6):at]):
                yield words, at


# ASCII text is cut into clauses and words by one byte translation: clause breaks to "\n", every other character
# that is not part of a word (a-z, 0-9, ') to " ". Other text is tokenised by `_TOKEN`, to the same words.
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789'")
_CLAUSE_TABLE = bytes(i if i in _WORD_BYTES or i >= 128 else 10 if chr(i) in _PUNCTUATION else 32 for i in range(256))


def _clauses(lowered: str) -> list[list[str]]:
    """The lower-cased text's word tokens, clause by clause (split at `_PUNCTUATION`); [] when it names no verb."""
    if lowered.isascii():
        spaced = lowered.encode("ascii").translate(_CLAUSE_TABLE).decode("ascii")
        if _VERB_FORMS.isdisjoint(spaced.split()):
            return []
        return [clause.split() for clause in spaced.split("\n")]
    tokens = _TOKEN.findall(lowered)
    if _VERB_FORMS.isdisjoint(tokens):
        return []
    clauses: list[list[str]] = [[]]
    for token in tokens:
        if token in _PUNCTUATION:
            clauses.append([])
        else:
            clauses[-1].append(token)
    return clauses


def enum_values(schema: Any) -> frozenset[str]:
    """Every string a schema declares in an `enum` (anywhere in it), lower-cased: options, not facts."""
    if type(schema) is dict:
        try:  # most schemas have no enum at all: their JSON text, written in C, shows that faster than a walk
            if b'"enum":' not in orjson.dumps(schema):  # only a key is written as `"enum":`
                return frozenset()
        except TypeError:  # not JSON (a set, a non-string key, a huge int): walk it
            pass
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if type(node) is dict or isinstance(node, Mapping):
            options = node.get("enum")
            if type(options) is list:
                found.update(o.lower() for o in options if type(o) is str)
            stack.extend(v for v in node.values() if type(v) is dict or type(v) is list)
        elif type(node) is list:
            stack.extend(v for v in node if type(v) is dict or type(v) is list)
    return frozenset(found)


def is_value_string(text: str) -> bool:
    """An id, name, code, date, amount, email or address, as opposed to free prose (which no rule can ground)."""
    words = text.split()
    if not words or len(words) > PROSE_WORDS:
        return False
    if len(words) == 1 or "@" in text or any(map(str.isdigit, text)):
        return True
    return len(words) <= 4 and all(w[:1].isupper() for w in words)  # a name or a place


def value_leaves(arguments: Any, enums: frozenset[str]) -> list[Any]:
    """The argument values that must come from the context: strings that are values (lower-cased, spaces
    collapsed) and numbers (int, or float when not whole), skipping booleans, nulls, declared enum options, prose
    and small counts."""
    found: list[Any] = []
    stack = [arguments]
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind is bool or value is None:
            continue
        if kind is dict:
            stack.extend(value.values())
        elif kind is list or kind is tuple:
            stack.extend(value)
        elif kind is str:
            text = " ".join(value.split())
            if _ARITHMETIC.fullmatch(text) and _OPERATOR.search(text):
                # An expression is computed, not copied: its operands are what must come from the context.
                stack.extend(_as_number(n) for n in _OPERAND.findall(text))
                continue
            lowered = text.lower()
            if lowered in enums or not is_value_string(text):
                continue
            number = _as_number(text) if _NUMBER_TEXT.fullmatch(text) else None
            if number is None:
                found.append(lowered)
            elif not (type(number) is int and abs(number) < SMALL_COUNT):
                found.append(number)
        elif kind is int:
            if abs(value) >= SMALL_COUNT:
                found.append(value)
        elif kind is float or isinstance(value, (int, float, Fraction)):
            number = _float_number(value) if kind is float else _as_number(str(value))
            if number is not None and not (type(number) is int and abs(number) < SMALL_COUNT):
                found.append(number)
        elif isinstance(value, Mapping):
            stack.extend(value.values())
    return found


def _float_number(value: float) -> int | float | None:
    """`_as_number(str(value))` of a float without parsing its text: a whole one below 2**53 as an int (its repr is
    its digits and ".0"), another finite one as itself (its repr reads back to it), else the parse."""
    if value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    if value == value and not value.is_integer() and abs(value) != float("inf"):
        return value
    return _as_number(str(value))


def _as_number(text: str) -> int | float | None:
    """A number written as text: an int when it is whole ("250", "250.0"), else a float; None when it is none."""
    if "_" not in text:  # int() and float() read "1_000"; a logged value with an underscore is an id
        try:
            return int(text)
        except ValueError:
            pass
    try:
        number = Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None
    return int(number) if number.denominator == 1 else float(number)


def spellings(value: Any) -> tuple[list[str], list[str]]:
    """How a value may be written (lower case): (as data writes it, as people also write it). A number with and
    without decimals, and also with separators; a date as ISO, and also as month and day; a string as itself."""
    if type(value) is int:
        return [str(value), f"{value}.0"], [f"{value:,}", f"{value}.00"]
    if type(value) is float:
        return [repr(value)], list(dict.fromkeys((f"{value:.2f}", f"{value:,.2f}")))
    date = _ISO_DATE.fullmatch(value) if len(value) == 10 and value[4] == "-" else None
    if date is None:
        return [value], []
    month, day = int(date.group(2)), int(date.group(3))
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return [value], []
    name = _MONTHS[month - 1]
    days = (str(day), f"{day}{_ORDINAL.get(day, 'th')}")
    forms = [f"{month}/{day}", f"{month:02d}/{day:02d}"]
    for written in (name, name[:3]):
        forms += [f"{written} {d}" for d in days] + [f"{d} {written}" for d in days] + [f"{days[1]} of {written}"]
    return [value], forms


def _found(needle: str, hay: str, end: int) -> bool:
    """Is `needle` in `hay[:end]` with no letter or digit glued to either end of it?"""
    start = 0
    size = len(needle)
    while True:
        at = hay.find(needle, start, end)
        if at < 0:
            return False
        before = hay[at - 1] if at else " "
        after = hay[at + size] if at + size < len(hay) else " "
        if not (before.isalnum() and needle[0].isalnum()) and not (after.isalnum() and needle[-1].isalnum()):
            return True
        start = at + 1


@lru_cache(maxsize=64)
def _prompt_text(text: str) -> str:
    """A system prompt as the corpus holds it (spaces collapsed, lower case): made once per distinct prompt, since
    a log's conversations mostly share a few."""
    return " ".join(text.split()).lower()


class _Corpus:
    """One kind of grounding text so far: `text`, and `ends[i]`, its length before message i (i < len(ends))."""

    __slots__ = ("text", "ends", "pending")

    def __init__(self) -> None:
        self.text, self.ends = "", [0]
        self.pending = -1  # "endorsed": the agent's last text, waiting for the user's next message


class ConversationFacts:
    """One conversation's messages as the tool checks read them, each derived once and only when asked."""

    __slots__ = ("messages", "kind", "roles", "assistant_turns", "_texts", "_calls", "_outcomes", "_affirmed",
                 "_corpora", "_grounded", "_by_name", "_canonicals", "_wordings")

    def __init__(self, messages: Sequence[Mapping[str, Any]], kind: Callable[[str], str]):
        self.messages = messages
        self.kind = kind
        # Every walk over the conversation reads roles: one list of them, built once.
        self.roles = [m.get("role") for m in messages]
        self.assistant_turns = [i for i, role in enumerate(self.roles) if role == "assistant"]
        self._texts: dict[int, str] = {}
        self._calls: dict[int, list[dict[str, Any]]] = {}
        self._outcomes: dict[tuple[int, Any], str] = {}
        self._affirmed: dict[int, bool] = {}
        self._corpora: dict[str, _Corpus] = {}
        self._grounded: dict[tuple[Any, int], bool] = {}
        self._by_name: dict[str, list[tuple[int, dict[str, Any]]]] | None = None
        self._canonicals: dict[int, str] = {}
        self._wordings: dict[int, bytes] = {}

    def text(self, index: int) -> str:
        text = self._texts.get(index)
        if text is None:
            text = self._texts[index] = message_text(self.messages[index])
        return text

    def wording(self, index: int) -> bytes:
        """`_grounding.wording` of a message's text, made once: claims and digit values are both read by wording."""
        found = self._wordings.get(index)
        if found is None:
            found = self._wordings[index] = wording(self.text(index))
        return found

    def digit_values(self, index: int) -> list[str]:
        """`_grounding.digit_values` of a message's text, read by its wording ([] for no text)."""
        text = self.text(index)
        return digit_values(text, self.wording(index)) if text else []

    def calls(self, index: int) -> list[dict[str, Any]]:
        calls = self._calls.get(index)
        if calls is None:
            calls = self._calls[index] = tool_calls(self.messages[index])
        return calls

    def outcome(self, turn: int, call_id: Any) -> str:
        """"ok", "error" or "unknown", from the call's own result."""
        key = (turn, call_id)
        outcome = self._outcomes.get(key)
        if outcome is None:
            result = tool_result(self.messages, call_id, turn + 1)
            if result is None:
                outcome = "unknown"
            else:
                text = message_text(result)
                # A JSON object reports an error only under an "error" key: without that word it is no error.
                plain = text.lstrip()[:1] == "{" and '"error"' not in text
                outcome = "ok" if plain or not is_error_result(text) else "error"
            self._outcomes[key] = outcome
        return outcome

    def user_affirmed(self, index: int) -> bool:
        said = self._affirmed.get(index)
        if said is None:
            said = self._affirmed[index] = affirmed(self.text(index), _YES, _NO)
        return said

    # -------------------------------------------------------------------------------------------- grounding
    def _corpus(self, sources: str, before: int) -> tuple[str, int]:
        """(grounding text, the length of it available before message `before`): one lower-cased string per kind
        of source, in the order it became available, built only as far as a call asks and extended as turns
        advance. "all": what people wrote (the user, and the operator's system prompt: a price list, today's date)
        and what tools returned; "people": what people wrote; "endorsed": what the agent proposed and the user then
        said yes to."""
        corpus = self._corpora.get(sources)
        if corpus is None:
            corpus = self._corpora[sources] = _Corpus()
        if before >= len(corpus.ends):
            self._extend(sources, corpus, before)
        return corpus.text, corpus.ends[before]

    def _extend(self, sources: str, corpus: "_Corpus", before: int) -> None:
        roles = self.roles
        pieces = []
        length = len(corpus.text)
        for index in range(len(corpus.ends) - 1, before):
            role = roles[index]
            piece = None
            if sources != "endorsed":
                if role == "user":
                    piece = " ".join(self.text(index).split()).lower()
                elif role == "system":
                    piece = _prompt_text(self.text(index))
                elif sources == "all" and role == "tool":
                    piece = self.text(index).lower()
            elif role == "assistant" and self.text(index).strip():
                corpus.pending = index
            elif role == "user":
                if corpus.pending >= 0 and self.user_affirmed(index):
                    piece = " ".join(self.text(corpus.pending).split()).lower()
                corpus.pending = -1
            if piece is not None:
                pieces.append(piece)
                length += len(piece) + 1
            corpus.ends.append(length)
        if pieces:
            corpus.text += "\n".join(pieces) + "\n"

    def grounded(self, value: Any, before: int) -> bool:
        """Is the value written in what the user said, a tool returned or the system prompt stated before message
        `before` (or, failing that, in an agent proposal the user said yes to)? A date also counts when it lies a
        shift the user spoke of ("the next day") away from one that is (`_relative_days`)."""
        corpus, end = self._corpus("all", before)
        key = (value, end)
        known = self._grounded.get(key)
        if known is not None:
            return known
        found = self._written(value, before)
        if not found and type(value) is str and _ISO_DATE.fullmatch(value):
            roles = self.roles
            shifts = day_shifts(" ".join(self.text(i).lower() for i in range(before) if roles[i] == "user"))
            found = bool(shifts) and any(self._written(moved, before) for moved in shifted_dates(value, shifts))
        self._grounded[key] = found
        return found

    def _written(self, value: Any, before: int) -> bool:
        """`grounded` without reading shifts: the value itself, in any of its `spellings`."""
        corpus, end = self._corpus("all", before)
        data_forms, people_forms = spellings(value)
        for form in data_forms:  # a loop, not any(): most values have one form, found at once
            if _found(form, corpus, end):
                return True
        if people_forms:
            people, people_end = self._corpus("people", before)
            if any(_found(form, people, people_end) for form in people_forms):
                return True
        endorsed, endorsed_end = self._corpus("endorsed", before)
        return any(_found(form, endorsed, endorsed_end) for form in data_forms + people_forms)

    def grounded_share(self, values: Sequence[Any], before: int) -> tuple[float | None, list[Any]]:
        """(share of the call's values (`value_leaves`) found in the context, those not found); None for none."""
        if not values:
            return None, []
        missing = [v for v in values if not self.grounded(v, before)]
        return 1 - len(missing) / len(values), missing

    # -------------------------------------------------------------------------------------- consent, claims
    def went_ahead(self, turn: int) -> bool:
        """Did the user say yes since the agent last wrote to them (its proposal), before this turn?"""
        roles = self.roles
        for index in range(turn - 1, -1, -1):
            role = roles[index]
            if role == "user" and self.user_affirmed(index):
                return True
            if role == "assistant" and self.text(index).strip():
                return False
        return False

    def proposed(self, values: Sequence[Any], turn: int) -> bool:
        """Are all the call's values (`value_leaves`) in the agent's last proposal or what the user said since?"""
        texts = []
        roles = self.roles
        for index in range(turn - 1, -1, -1):
            role = roles[index]
            if role == "user":
                texts.append(self.text(index))
            elif role == "assistant" and self.text(index).strip():
                texts.append(self.text(index))
                break
        hay = " ".join(" ".join(t.split()) for t in texts).lower()
        return all(any(_found(form, hay, len(hay)) for forms in spellings(v) for form in forms) for v in values)

    def unbacked_claim(self, turn: int, acting: bool) -> bool:
        """Does this turn's reply claim a change (`claims_change`) that no call made since the user's last message?
        The claim is read first: read once per wording, it is the cheaper question, and most replies claim none."""
        # (`claims_change` of the text, from its wording)
        return (bool(self.text(turn).strip()) and _wording_claims(self.wording(turn), acting)
                and not self.changed_since_user(turn))

    def changed_since_user(self, turn: int) -> bool:
        """Did a state-changing or hand-off call that took effect run since the user's last message (this turn's
        own calls included)?"""
        roles = self.roles
        for index in range(turn, -1, -1):
            role = roles[index]
            if role == "user":
                return False
            if role == "assistant":
                for call in self.calls(index):
                    if self.kind(call["name"]) != "read" and self.outcome(index, call["id"]) != "error":
                        return True
        return False

    def repeats_failure(self, turn: int, call: Mapping[str, Any]) -> bool:
        """Is this call, same name and same arguments, one that already returned an error before this turn?"""
        turns = self.assistant_turns
        if not turns or turn <= turns[0]:
            return False  # no call came before it (the usual case: a conversation's first call)
        if self._by_name is None:
            self._by_name = {}
            for index in self.assistant_turns:
                for earlier in self.calls(index):
                    self._by_name.setdefault(earlier["name"], []).append((index, earlier))
        failed = [c for i, c in self._by_name.get(call["name"], ()) if i < turn and self.outcome(i, c["id"]) == "error"]
        if not failed:
            return False
        same = self._canonical(call)
        return any(self._canonical(c) == same for c in failed)

    def _canonical(self, call: Mapping[str, Any]) -> str:
        key = id(call)
        canonical = self._canonicals.get(key)
        if canonical is None:
            canonical = self._canonicals[key] = canonical_arguments(call["arguments"])
        return canonical


def canonical_arguments(raw: Any) -> str:
    """The arguments as one comparable string (key order and spacing ignored); the raw text when they do not parse."""
    arguments, _ = parse_arguments(raw)
    if arguments is None:
        return str(raw)
    return json.dumps(arguments, sort_keys=True, default=str)
