"""Is a reply text at all? Degenerate text that a model under RL finds: loops, word salad, non-words, cut-off replies.

Everything here is rule-based and domain-independent, and reads only the reply itself (relevance to the user's
request reads the context too):

* word order: a closed-class grammar. English function words (determiners, prepositions, subject pronouns,
  modals and the copula, conjunctions, "to") follow each other in a few fixed ways: "the of", "we the", "will can",
  "and or" are next to impossible in written English, and so are a function word capitalised in mid-sentence and a
  sentence starting in lower case. Shuffled words break these constantly; a fluent reply almost never does.
* repetition: repeated word trigrams (a sentence said again, a phrase looped).
* vocabulary: lower-case words that are in no English word list (SCOWL, shipped as data/english_words.txt.gz; see
  docs/rewards.md for its source and licence). Capitalised words (names, places) and tokens with digits (ids) are
  never judged here.
* completeness: a reply that stops without closing punctuation, worst on a function word ("...to the").

Every score is a float in [0, 1], 1 for ordinary fluent text.
"""
from __future__ import annotations

import gzip
import re
from functools import lru_cache
from pathlib import Path
from itertools import repeat
from typing import Iterable

_WORDS_FILE = Path(__file__).resolve().parent / "data" / "english_words.txt.gz"

# Closed classes. Words that belong to two classes ("that", "this", "her", "before", "since") are left out, so a
# rule fires only where no reading of the words makes it grammatical.
_DETERMINERS = ("the", "a", "an", "my", "your", "our", "their", "its", "every")
_PREPOSITIONS = ("of", "in", "on", "at", "for", "with", "from", "by", "about", "into", "onto", "through", "during",
                 "without", "within", "between", "under", "upon", "via", "per", "among", "against", "toward",
                 "towards", "across", "behind", "beyond")
_SUBJECTS = ("we", "they", "he", "she")
_MODALS = ("will", "would", "can", "could", "shall", "should", "might", "must", "is", "are", "was", "were", "am")
_AUXILIARIES = ("have", "has", "had", "do", "does", "did", "be", "been", "being")
_CONJUNCTIONS = ("and", "or", "but", "nor")

# One letter per token: lower case for a word written in lower case, upper case when capitalised; "w" for any
# other word or number. "i" is a subject pronoun that is always capitalised: grammar rules read it, casing rules not.
_CLASS: dict[str, str] = {"i": "i", "I": "i"}
for _letter, _words in (("d", _DETERMINERS), ("p", _PREPOSITIONS), ("s", _SUBJECTS), ("m", _MODALS),
                        ("a", _AUXILIARIES), ("c", _CONJUNCTIONS), ("t", ("to",))):
    for _word in _words:
        _CLASS[_word] = _letter
        _CLASS[_word.capitalize()] = _letter.upper()

# Forbidden neighbours (two words with only spaces between them), as a regex over the class letters; "." is a
# sentence end, "," a comma or semicolon, ":" anything else that separates (a colon, a bracket, a new line).
# Lookahead, so that overlapping pairs all count.
_GRAMMAR = re.compile(
    r"(?=[dD][dDpPsSimMcCaA.,]"  # a determiner needs its noun: not another function word, a comma or a full stop
    r"|[pP][sSimM]"               # "of we", "for is"
    r"|[sSi][dDpPsSi]"            # "we the", "they of", "I we"
    r"|[mM][mM]"                  # "will can", "is are"
    r"|[cC][cC.]"                 # "and or", "and."
    r"|[tT][sSimMcC]"             # "to we", "to is", "to and"
    r"|[a-z,][DPSMCTA]"           # a function word capitalised in mid-sentence
    r"|\.[dpsmcta]"              # a sentence starting with a function word in lower case
    r")")
# Words and the punctuation that separates them ("." a sentence end, "," a pause, ":" a colon or a new line), from
# one regex pass; the reward keeps the tokens for its phrase screens too.
_TOKEN = re.compile(r"\w+|[.!?,;:\n]")
_CLASS.update({".": ".", "!": ".", "?": ".", ",": ",", ";": ",", ":": ":", "\n": ":"})
_CLOSING = frozenset(".!?:;)]}\"'*`\u2026\u201d\u2019")
_NOT_JUDGED = frozenset(w.lower() for w in _CLASS)


def tokenise(text: str) -> tuple[list[str], list[str]]:
    """(tokens in their own case, the same lower-cased): words, numbers and the separating punctuation."""
    tokens = _TOKEN.findall(text)
    return tokens, (" ".join(tokens).lower().split(" ") if tokens else [])


class DigitTemplate:
    """A text's `tokenise` tokens, to tokenise cheaply the texts that differ from it only in which ASCII digits they
    have (the same length, every other character the same): a digit is a word character like any other, so the token
    boundaries are the same and only the tokens holding digits are sliced from the other text. (Lower-casing never
    looks past the space between two tokens, so a token lower-cased alone is lower-cased as in `tokenise`.)"""

    __slots__ = ("cased", "lowered", "digit_spans")

    def __init__(self, text: str):
        self.cased, self.lowered = tokenise(text)
        self.digit_spans = [(index, match.start(), match.end()) for index, match in enumerate(_TOKEN.finditer(text))
                            if ASCII_DIGIT.search(match.group())]

    def tokenise(self, text: str) -> tuple[list[str], list[str]]:
        """`tokenise(text)` for a text that differs from the template's only in its ASCII digits."""
        cased, lowered = self.cased.copy(), self.lowered.copy()
        for index, start, end in self.digit_spans:
            token = cased[index] = text[start:end]
            lowered[index] = token.lower()
        return cased, lowered


#: The digits a text's wording abstracts away (`_grounding.wording`); other scripts' digits stay as they are.
ASCII_DIGIT = re.compile(r"[0-9]")


#: Share of a reply's words in a forbidden word-order pair at which the word-order score reaches 0.
WORD_ORDER_ZERO_RATE = 0.2
#: Share of repeated word trigrams a reply may have (lists repeat their frame) before it counts as looping.
NGRAM_REPEAT_ALLOWANCE = 0.15
#: Share of unknown lower-case words a reply may have (typos, trade words) before it counts against it.
UNKNOWN_WORD_ALLOWANCE = 0.05


def stems(word: str) -> list[str]:
    """Shorter forms a word may be inflected or derived from by a regular English suffix."""
    out = []
    for suffix in ("ing", "ed", "es", "s", "ly", "er", "est", "d", "ies", "ied", "ier", "iest", "ily"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            stem = word[: -len(suffix)]
            if suffix[0] == "i":
                out.append(stem + "y")
                continue
            out.append(stem)
            if suffix in ("ing", "ed", "er", "est"):
                out.append(stem + "e")
                if len(stem) > 2 and stem[-1] == stem[-2]:
                    out.append(stem[:-1])  # "cancelled" -> "cancel", "stopping" -> "stop"
    return out


@lru_cache(maxsize=1)
def vocabulary() -> frozenset[str]:
    """The shipped English word list: base forms; `known_word` derives the inflected ones."""
    with gzip.open(_WORDS_FILE, "rt", encoding="utf-8") as handle:
        return frozenset(handle.read().split())


# Words decided so far: the list's own words are known from the start; inflected forms join on first use. Sets, so
# that a text's words are checked with one C-level set difference. Bounded: invented words must not grow memory.
_KNOWN_FORMS: set[str] = set()
_UNKNOWN_FORMS: set[str] = set()
_DECIDED_LIMIT = 200_000


def known_word(word: str) -> bool:
    """Is a lower-case word English (in the list, or a regular inflection of a word in it)?"""
    if word in _KNOWN_FORMS:
        return True
    if word in _UNKNOWN_FORMS:
        return False
    words = vocabulary()
    if not _KNOWN_FORMS:
        _KNOWN_FORMS.update(words)
    known = word in words or any(s in words or any(t in words for t in stems(s)) for s in stems(word))
    if len(_KNOWN_FORMS) + len(_UNKNOWN_FORMS) < _DECIDED_LIMIT + len(words):
        (_KNOWN_FORMS if known else _UNKNOWN_FORMS).add(word)
    return known


class TextShape:
    """The fluency scores of one text, from its `tokenise` tokens (and the number of distinct lower-case token
    trigrams, which the reward keeps for its repeated-reply check).

    `like`: the shape of a text that differs from this one only in which ASCII digits it has, where a caller has
    one (replies that differ in an amount or an id). A digit is a word character that is no function word and no
    word to judge, so word order, completeness and the unknown words carry over; only the counts of distinct
    tokens and trigrams are this text's own."""

    __slots__ = ("word_order", "repetition", "vocabulary", "complete", "unknown")

    def __init__(self, text: str, tokens: list[str] | None = None, lowered: list[str] | None = None,
                 distinct_trigrams: int | None = None, lowered_set: frozenset[str] | None = None,
                 like: "TextShape | None" = None):
        if tokens is None or lowered is None:
            tokens, lowered = tokenise(text)
            lowered_set = None
        if lowered_set is None:  # the caller's set of the lowered tokens, when it keeps one
            lowered_set = frozenset(lowered)
        if distinct_trigrams is None:
            distinct_trigrams = len(set(zip(lowered, lowered[1:], lowered[2:])))
        self.repetition = _repetition(len(lowered), distinct_trigrams)
        lower_words = None
        if like is None:
            shape = "".join(map(_CLASS.get, tokens, repeat("w", len(tokens))))
            words = len(shape) - shape.count(".") - shape.count(",") - shape.count(":")
            violations = len(_GRAMMAR.findall(shape)) if words > 1 else 0
            self.word_order = max(0.0, 1.0 - violations / (WORD_ORDER_ZERO_RATE * words)) if words else 1.0
            self.complete = _completeness(text, shape)
            # the words written in lower case: a token equal to its own lower-cased form
            lower_words = (set(tokens) & lowered_set) - _NOT_JUDGED
            self.unknown = _unknown_words(lower_words)
        else:
            self.word_order, self.complete, self.unknown = like.word_order, like.complete, like.unknown
        if not self.unknown:
            self.vocabulary = 1.0
        else:
            if lower_words is None:
                lower_words = (set(tokens) & lowered_set) - _NOT_JUDGED
            self.vocabulary = _vocabulary(self.unknown, len(lower_words))


def _repetition(count: int, distinct_trigrams: int) -> float:
    """1 unless word trigrams repeat beyond what a list's frame explains ("from JFK to" in every line); then down
    in proportion, to 0 for a text that is one phrase over and over."""
    if count < 8:
        return 1.0
    repeated = 1.0 - distinct_trigrams / (count - 2)
    if repeated <= NGRAM_REPEAT_ALLOWANCE:
        return 1.0
    return max(0.0, 1.0 - (repeated - NGRAM_REPEAT_ALLOWANCE) / (1.0 - NGRAM_REPEAT_ALLOWANCE))


def _unknown_words(lower_words: set[str]) -> int:
    """How many of the distinct lower-case words (three letters or more) are no English word."""
    if not lower_words:
        return 0
    if not _KNOWN_FORMS:
        known_word("the")  # loads the list
    return sum(1 for w in lower_words - _KNOWN_FORMS if len(w) >= 3 and w.isalpha() and not known_word(w))


def _vocabulary(unknown: int, distinct: int) -> float:
    """From the share of distinct lower-case words that are no English word, past an allowance."""
    return max(0.0, 1.0 - 4.0 * max(0.0, unknown / distinct - UNKNOWN_WORD_ALLOWANCE))


def _completeness(text: str, shape: str) -> float:
    """1 for a reply that ends as sentences end; 0.5 for one that just stops; 0 for one cut off after a function
    word ("...to the"). Closing marks include quotes, brackets, markdown emphasis and any non-ASCII symbol (emoji)."""
    stripped = text.rstrip()
    if not stripped:
        return 0.0
    last = stripped[-1]
    if last in _CLOSING or not last.isascii():
        return 1.0
    return 0.0 if shape and shape[-1].lower() in "dpctsai" else 0.5


_CONTENT_STOP = frozenset(_CLASS) | {
    "i", "you", "it", "me", "us", "them", "this", "that", "these", "those", "there", "here", "what", "which", "who",
    "how", "when", "where", "why", "if", "so", "not", "no", "yes", "any", "all", "some", "please", "thank", "thanks",
    "let", "know", "like", "just", "also", "now", "then", "than", "very", "more", "one", "get", "need", "help",
    "assist", "sure", "want", "make", "sorry", "hello", "hi", "okay", "ok", "great", "good", "can", "could", "would",
    "will", "im", "ll", "ve", "re", "don", "t", "s", "d", "m"}
#: Replies shorter than this (in words) are not judged for relevance: a greeting or a thank-you needs no topic.
RELEVANCE_MIN_WORDS = 8


def content_words(words: Iterable[str]) -> frozenset[str]:
    """The words of a token list that carry its topic (no function words, no pleasantries, three letters or more)."""
    return frozenset(w for w in words if len(w) >= 3 and w not in _CONTENT_STOP and w.isalpha())


def relevance(reply_words: Iterable[str], request_words: Iterable[str]) -> float | None:
    """1 when a reply shares a topic word with the request it answers (the user's latest message), 0 when it shares
    none; None for a reply too short to judge or a request with no topic word ("thanks!")."""
    reply = content_words(reply_words)
    request = content_words(request_words)
    if len(reply) < RELEVANCE_MIN_WORDS // 2 or not request:
        return None
    return 1.0 if not reply.isdisjoint(request) else 0.0
