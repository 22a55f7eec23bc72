"""What `customer_support` reads from one conversation: each message's text and what its words decide, kept per
distinct text across conversations (`TextFacts`, in a bounded store), and the conversation's tool calls, their kinds
and outcomes, its writes and its replies' trigrams, derived once per conversation (`SeenConversation`)."""
from __future__ import annotations

from typing import Any, Mapping

from stateset_agents.plugin_api.text import message_text

from ._grounding import GroundingIndex
from ._language import DigitTemplate, TextShape, tokenise
from ._text import last_message, tool_calls
from ._tools import call_outcome, declared_tools, tool_kind, tool_verb

#: Jaccard overlap of word trigrams above which a reply counts as an earlier reply repeated.
REPEAT_OVERLAP = 0.6


class ReplyReading:
    """What an assistant text's words say (`CustomerSupportReward._read_wording`), shared by the texts of a wording,
    with the first such text's `TextShape` and tokens (the others' are the same but for their digits)."""

    __slots__ = ("unsafe", "rude", "tone", "escalates", "offers_handoff", "resolution", "claimed", "promises",
                 "shape", "tokens")


class TextFacts:
    """One message text and, once read, what the reward decides from the text alone (its tokens, from
    `_language.tokenise`, only for a reply). Kept per distinct text, so a reply said in many conversations ("You're
    welcome!") is read once."""

    __slots__ = ("text", "blank", "cased", "lowered", "words", "_shingles", "reply", "user", "values", "shape")

    def __init__(self, text: str):
        self.text = text
        self.blank = not text.strip()
        self.words: frozenset[str] | None = None  # tokenised only when read as a reply
        self._shingles: frozenset | None = None
        self.reply: ReplyReading | None = None  # set once read as a reply, with `values` and `shape`
        self.user: tuple[bool, bool] | None = None
        self.values: list[str] = []
        self.shape: TextShape | None = None

    def tokenise(self, template: DigitTemplate | None = None) -> None:
        """`template`: the tokens of a text that differs from this one only in its digits, when there is one."""
        self.cased, self.lowered = tokenise(self.text) if template is None else template.tokenise(self.text)
        self.words = frozenset(self.lowered)

    @property
    def shingles(self) -> frozenset:
        """The distinct lower-cased token trigrams (the repeated-reply check and the repetition score read them)."""
        if self._shingles is None:
            if self.words is None:
                self.tokenise()
            lowered = self.lowered
            self._shingles = frozenset(zip(lowered, lowered[1:], lowered[2:]))
        return self._shingles


NO_TEXT = TextFacts("")
NO_TEXT.user = (False, False)  # no user message: nothing asked, nothing corrected
#: Distinct texts kept per reward (then the store starts afresh), and the longest text kept: the store is for the
#: short replies said again and again; a long one rarely repeats and costs the most memory.
TEXT_STORE_SIZE = 2048
TEXT_STORE_MAX_CHARS = 1000


def remember(store: dict, key: bytes | str, value):
    """Keep `value` under `key` in a bounded store (`TEXT_STORE_SIZE`, `TEXT_STORE_MAX_CHARS`); returns it."""
    if len(key) <= TEXT_STORE_MAX_CHARS:
        if len(store) >= TEXT_STORE_SIZE:
            store.clear()
        store[key] = value
    return value


class SeenConversation:
    """One conversation's messages with what grading reads from them (texts, tool calls, tool kinds, call
    outcomes), each derived on first use and kept for the conversation's other turns."""

    __slots__ = ("messages", "_conversation", "_declared", "_store", "_texts", "_facts", "_calls", "_kinds",
                 "_outcomes", "_grounding", "_looked_up", "_first_write", "_assistant", "_reply_shingles")

    def __init__(self, conversation: Mapping[str, Any], store: dict[str, TextFacts] | None = None):
        self.messages = conversation["messages"]
        self._conversation = conversation
        self._declared: dict[str, Mapping[str, Any]] | None = None  # read at the first tool call
        self._store = {} if store is None else store
        self._texts: dict[int, str] = {}
        self._facts: dict[int, TextFacts] = {}
        self._calls: dict[int, list[dict[str, Any]]] = {}
        self._kinds: dict[Any, str] = {}
        self._outcomes: dict[tuple[int, Any], str] = {}
        self._grounding: GroundingIndex | None = None
        self._looked_up: GroundingIndex | None = None
        self._first_write: list[tuple[int, str]] | None = None
        self._assistant: list[int] | None = None
        self._reply_shingles: list[frozenset] = []  # of the assistant turns in order, as far as compared

    @property
    def grounding(self) -> GroundingIndex:
        if self._grounding is None:
            self._grounding = GroundingIndex(self.messages)
        return self._grounding

    @property
    def looked_up(self) -> GroundingIndex:
        """What tool results alone make known (what the agent looked up, not what anyone said)."""
        if self._looked_up is None:
            self._looked_up = GroundingIndex(self.messages, roles=("tool",))
        return self._looked_up

    def _writes(self) -> list[tuple[int, str]]:
        """(turn index, tool verb) of each state-changing call that succeeded, in order; derived once."""
        if self._first_write is None:
            self._first_write = [(i, tool_verb(c["name"])) for i, m in enumerate(self.messages)
                                 if m.get("role") == "assistant" for c in self.calls(i)
                                 if self.kind(c["name"]) == "write" and self.outcome(i, c["id"]) == "ok"]
        return self._first_write

    def wrote_between(self, after: int, before: int) -> bool:
        """Did a state-changing call succeed in an assistant turn after `after` and before `before`?"""
        return any(after < i < before for i, _ in self._writes())

    def verbs_written_before(self, index: int) -> set[str]:
        """The verbs (first words of the tool names) of the writes that succeeded before this turn."""
        return {verb for i, verb in self._writes() if i < index}

    def text(self, index: int) -> str:
        text = self._texts.get(index)
        if text is None:
            text = self._texts[index] = message_text(self.messages[index])
        return text

    def facts(self, index: int) -> TextFacts:
        """The message's text with its tokens, from the reward's store of texts when it was seen before."""
        facts = self._facts.get(index)
        if facts is None:
            text = self.text(index)
            facts = self._store.get(text)
            if facts is None:
                facts = remember(self._store, text, TextFacts(text))
            self._facts[index] = facts
        return facts

    def calls(self, index: int) -> list[dict[str, Any]]:
        calls = self._calls.get(index)
        if calls is None:
            calls = self._calls[index] = tool_calls(self.messages[index])
        return calls

    def kind(self, name: Any) -> str:
        kind = self._kinds.get(name)
        if kind is None:
            if self._declared is None:
                self._declared = declared_tools(self._conversation)
            kind = self._kinds[name] = tool_kind(name, self._declared.get(name))
        return kind

    def outcome(self, index: int, call_id: Any) -> str:
        key = (index, call_id)
        try:
            outcome = self._outcomes.get(key)
        except TypeError:  # an id that is no JSON scalar: not worth keeping
            return call_outcome(self.messages, index, call_id)
        if outcome is None:
            outcome = self._outcomes[key] = call_outcome(self.messages, index, call_id)
        return outcome

    def repeats_earlier_reply(self, index: int, facts: TextFacts) -> bool:
        """Is this reply (`facts`: its text) mostly, by word trigrams, an earlier reply of the agent's said again?"""
        if self._assistant is None:
            self._assistant = [i for i, m in enumerate(self.messages) if m.get("role") == "assistant"]
        assistant = self._assistant
        if not assistant or assistant[0] >= index:
            return False  # no earlier reply to repeat
        mine = facts.shingles
        if not mine:
            return False
        mine_size = len(mine)
        shingles = self._reply_shingles  # each earlier reply's, looked up once for all the turns after it
        for position, earlier in enumerate(assistant):
            if earlier >= index:
                break
            if position == len(shingles):
                shingles.append(self.facts(earlier).shingles)
            theirs = shingles[position]
            if not theirs:
                continue
            # Jaccard |mine & theirs| / |mine | theirs| >= REPEAT_OVERLAP, with the union's size from the sizes.
            # The overlap is at most the smaller set and the union at least the larger: a smaller set under
            # REPEAT_OVERLAP times the larger settles "no" without the intersection.
            small, large = (mine_size, len(theirs)) if mine_size <= len(theirs) else (len(theirs), mine_size)
            if small < REPEAT_OVERLAP * large:
                continue
            overlap = len(mine & theirs)
            if overlap >= REPEAT_OVERLAP * (mine_size + len(theirs) - overlap):
                return True
        return False

    def asked_before(self, index: int | None) -> bool:
        """Did the agent's latest reply before message `index` ask the user something?"""
        if index is None:
            return False
        for earlier in range(index - 1, -1, -1):
            if self.messages[earlier].get("role") == "assistant":
                text = self.text(earlier)
                if text.strip():
                    return "?" in text
            elif self.messages[earlier].get("role") == "user":
                return False
        return False

    def last_user(self, before: int) -> int | None:
        found = last_message(self.messages, "user", before)
        return found[0] if found else None
