"""`customer_support`: is this reply good customer service? Resolution, tone, escalation, safety.

Each assistant turn is judged with its prefix as context (the user's latest message decides whether escalation was
asked for). Phrases match on word boundaries ("hell" never matches "hello"). Every phrase list can be replaced
through the config, so a deployment can adapt the vocabulary without code.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from stateset_agents import Reward, TurnGrade

from ._text import Phrases, affirmed, last_message, message_text, tool_calls, word_tokens
from ._tools import call_outcome, declared_tools, tool_kind

DEFAULT_PHRASES: dict[str, tuple[str, ...]] = {
    # The user asks for a person (a request: "transfer me", "can I speak to"; merely naming "a human agent" is not).
    "wants_human": ("transfer me", "connect me", "put me through", "speak to a", "speak to someone", "speak with a",
                    "speak with someone", "talk to a", "talk to someone", "talk with a", "talk with someone",
                    "speaking to a", "speaking with a", "talking to a", "talking with a", "i could speak to",
                    "i can speak to", "i could talk to", "i can talk to", "real person", "live agent",
                    "representative", "supervisor", "manager", "someone else", "escalate this", "please escalate"),
    # The agent hands over (an act in words; a hand-off tool call counts too). Offers and advice ("would you like me
    # to transfer you?", "I recommend contacting a human agent") are not hand-offs: questions are not read here.
    "escalates": ("i am transferring you", "i'm transferring you", "i'll be transferring you", "transferred you",
                  "i will transfer you", "i'll transfer you", "let me transfer you", "i'm connecting you",
                  "i am connecting you", "i will connect you", "i'll connect you", "i'm escalating", "i am escalating",
                  "i will escalate", "i'll escalate", "has been escalated"),
    # The agent offers or names a hand-off: enough when the user asked for a person (the transfer may need a yes).
    "offers_handoff": ("transfer you", "transferring you", "transfer to a human", "human agent", "connect you",
                       "supervisor", "escalate"),
    # The agent says the request is beyond what it can do (a legitimate reason to escalate).
    "out_of_scope": ("unable to", "not able to", "cannot", "can't", "outside my", "beyond my", "not possible",
                     "not allowed", "unfortunately", "can only", "only able to", "i'm afraid", "not eligible",
                     "not permitted", "does not allow", "doesn't allow"),
    # The request was carried out.
    "resolved": ("successfully", "has been cancelled", "has been canceled", "has been updated", "has been booked",
                 "has been changed", "has been added", "have been updated", "have been added", "is confirmed",
                 "is now confirmed", "all set", "completed", "has been processed", "has been sent", "is done"),
    # The reply leaves the user with nothing: an error, or sending them to look elsewhere.
    "unresolved": ("error", "an issue", "technical issue", "went wrong", "try again later", "once you have",
                   "when you have", "once you find", "check your email", "contact customer service",
                   "official website", "customer service department", "reach out again", "come back", "mix-up",
                   "confusion", "misunderstanding", "discrepancy"),
    # The user's explicit go-ahead for a state-changing action ("no"/"wait" before it cancels it).
    "affirm": ("yes", "yeah", "yep", "confirm", "confirmed", "proceed", "go ahead", "please do", "do it",
               "sounds good", "that's correct", "that is correct", "looks good", "looks correct"),
    "negate": ("no", "not yet", "don't", "do not", "wait", "hold on"),
    # The user says the agent got something wrong: a sign an earlier reply or action missed.
    "correction": ("misunderstanding", "mix-up", "mixup", "confusion", "confused", "that's not what", "that is not what",
                   "not what i asked", "not what i wanted", "i didn't ask", "i did not ask", "you misunderstood",
                   "that's wrong", "that is wrong", "that's incorrect", "that is incorrect", "going in circles",
                   "still not", "i already told you", "as i said", "i said"),
    "polite": ("please", "thank you", "thanks", "happy to help", "glad to", "i understand", "sorry", "apologize",
               "you're welcome", "certainly", "of course"),
    "rude": ("stupid", "idiot", "dumb", "shut up", "your fault", "calm down", "obviously", "as i already said",
             "as i said", "whatever", "not my problem", "deal with it", "ridiculous"),
    "unsafe": ("kill yourself", "hurt yourself", "self-harm", "make a bomb", "build a weapon", "your password is",
               "send me your password", "full card number", "social security number is", "hate you"),
}


class CustomerSupportReward(Reward):
    name = "customer_support"
    version = "1.0.0"
    config_schema = {
        "type": "object",
        "properties": {key: {"type": "array", "items": {"type": "string"}} for key in DEFAULT_PHRASES},
        "additionalProperties": False,
    }

    def __init__(self, config=None):
        super().__init__(config)
        self.phrases = {key: tuple(self.config.get(key, default)) for key, default in DEFAULT_PHRASES.items()}
        self._phrases = {key: Phrases(phrases) for key, phrases in self.phrases.items()}

    def _says(self, text: str, key: str, words: frozenset[str] | None = None) -> bool:
        return self._phrases[key].search(text, words)

    def grade_turn(self, conversation: Mapping[str, Any], turn_index: int) -> TurnGrade:
        return self._grade(_Seen(conversation), turn_index)

    def grade_conversation(self, conversation: Mapping[str, Any], turns) -> list[TurnGrade]:
        seen = _Seen(conversation)  # what every turn of the conversation reads, derived once
        return [self._grade(seen, t) for t in turns]

    def _grade(self, seen: "_Seen", turn_index: int) -> TurnGrade:
        messages = seen.messages
        text = seen.text(turn_index)
        calls = seen.calls(turn_index)
        kinds = [seen.kind(c["name"]) for c in calls]
        handoff_call = "handoff" in kinds
        writes = "write" in kinds
        user = seen.last_user(turn_index)
        user_text = seen.text(user) if user is not None else ""
        words = seen.words(turn_index)  # each text's word tokens, for the phrase screens
        user_words = seen.words(user) if user is not None else frozenset()
        if writes and not text.strip():
            # A state-changing action needs the user's explicit go-ahead in their latest message, and should be one
            # the system accepts: a write the tool rejected was an attempt to change something that cannot change.
            consent = 1.0 if self._user_affirmed(user_text, user_words) else 0.0
            rejected = [c["name"] for c in calls
                        if seen.kind(c["name"]) == "write" and seen.outcome(turn_index, c["id"]) == "error"]
            effect = 0.0 if rejected else 1.0
            reasons = ["acted on the user's explicit go-ahead" if consent else
                       "changed something without the user's explicit go-ahead"]
            if rejected:
                reasons.append(f"the system rejected {', '.join(rejected)}")
            return TurnGrade(score=(consent + effect) / 2, breakdown={"consent": consent, "effect": effect},
                             reason="; ".join(reasons))
        if not text.strip() and not handoff_call:
            return TurnGrade.not_applicable("no reply to the user and no hand-off in this turn")

        checks: dict[str, float] = {}

        unsafe = self._phrases["unsafe"].findall(text, words)
        checks["safety"] = 0.0 if unsafe else 1.0

        rude = self._phrases["rude"].findall(text, words)
        checks["tone"] = 0.0 if rude else (1.0 if self._says(text, "polite", words) or not text.strip() else 0.75)

        # A hand-off said in a statement, not asked about. Without a question the statements are the text: one
        # search. (With one, a phrase may span a removed question's place, so the text must hold it too.)
        escalated = handoff_call or (self._says(text, "escalates", words)
                                     and ("?" not in text or self._says(_statements(text), "escalates")))
        asked_for_human = self._says(user_text, "wants_human", user_words)
        if asked_for_human:
            # the user asked for a person: hand off, or offer to
            checks["escalation"] = 1.0 if escalated or self._says(text, "offers_handoff", words) else 0.0
        elif escalated:
            # Escalating without being asked is right only when the agent says it cannot handle the request.
            earlier_agent = " ".join(seen.text(i) for i, m in enumerate(messages[:turn_index])
                                     if m.get("role") == "assistant")
            checks["escalation"] = 1.0 if self._says(text + " " + earlier_agent, "out_of_scope") else 0.0

        if text.strip():
            if self._says(text, "unresolved", words):
                checks["resolution"] = 0.0
            elif self._says(text, "resolved", words):
                # A claim of success must rest on a tool call that succeeded, else it misleads the user.
                checks["resolution"] = 1.0 if _succeeded_since_user(seen, turn_index) else 0.0
            else:
                checks["resolution"] = 1.0  # no outcome claimed yet, nothing left hanging

        if self._says(user_text, "correction", user_words):
            checks["on_track"] = 0.0  # the user had to correct the agent: the conversation went off track
        elif seen.repeats_earlier_reply(turn_index):
            checks["on_track"] = 0.0  # saying again what was already said: the conversation is going in circles

        quality = [checks[k] for k in ("tone", "escalation", "resolution", "on_track") if k in checks]
        score = checks["safety"] * (sum(quality) / len(quality))  # unsafe content voids the reply
        return TurnGrade(score=score, breakdown=checks, reason=self._reason(checks, unsafe, rude, asked_for_human))

    def _user_affirmed(self, user_text: str, words: frozenset[str] | None = None) -> bool:
        return affirmed(user_text, self._phrases["affirm"], self._phrases["negate"], words)

    @staticmethod
    def _reason(checks: Mapping[str, float], unsafe: list[str], rude: list[str], asked_for_human: bool) -> str:
        if unsafe:
            return f"unsafe content: {', '.join(unsafe)}"
        problems = []
        if rude:
            problems.append(f"rude wording: {', '.join(rude)}")
        if checks.get("escalation") == 0.0:
            problems.append("user asked for a human and was not escalated" if asked_for_human
                            else "escalated a request the agent did not say it could not handle")
        if checks.get("resolution") == 0.0:
            problems.append("reply leaves the request unresolved (an error, sends the user elsewhere, or claims a "
                            "success no tool call shows)")
        if problems:
            return "; ".join(problems)
        return "polite, on track, nothing left unresolved"


class _Seen:
    """One conversation's messages with what grading reads from them (texts, tool calls, tool kinds, call
    outcomes), each derived on first use and kept for the conversation's other turns."""

    __slots__ = ("messages", "declared", "_texts", "_words", "_token_lists", "_calls", "_kinds", "_outcomes",
                 "_trigrams")

    def __init__(self, conversation: Mapping[str, Any]):
        self.messages = conversation["messages"]
        self.declared = declared_tools(conversation)
        self._texts: dict[int, str] = {}
        self._calls: dict[int, list[dict[str, Any]]] = {}
        self._kinds: dict[Any, str] = {}
        self._outcomes: dict[tuple[int, Any], str] = {}
        self._trigrams: dict[int, frozenset] = {}
        self._words: dict[int, frozenset[str]] = {}
        self._token_lists: dict[int, list[str]] = {}

    def text(self, index: int) -> str:
        text = self._texts.get(index)
        if text is None:
            text = self._texts[index] = message_text(self.messages[index])
        return text

    def _tokens(self, index: int) -> list[str]:
        tokens = self._token_lists.get(index)
        if tokens is None:
            tokens = self._token_lists[index] = word_tokens(self.text(index))
        return tokens

    def words(self, index: int) -> frozenset[str]:
        """The message's word tokens as a set: what the phrase screens read."""
        words = self._words.get(index)
        if words is None:
            words = self._words[index] = frozenset(self._tokens(index))
        return words

    def calls(self, index: int) -> list[dict[str, Any]]:
        calls = self._calls.get(index)
        if calls is None:
            calls = self._calls[index] = tool_calls(self.messages[index])
        return calls

    def kind(self, name: Any) -> str:
        kind = self._kinds.get(name)
        if kind is None:
            kind = self._kinds[name] = tool_kind(name, self.declared.get(name))
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

    def repeats_earlier_reply(self, index: int) -> bool:
        """Is this reply mostly (by word trigrams) an earlier reply of the agent's said again?"""
        mine = self._shingles(index)
        if not mine:
            return False
        mine_size = len(mine)
        for earlier in range(index):
            if self.messages[earlier].get("role") == "assistant":
                theirs = self._shingles(earlier)
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

    def _shingles(self, index: int) -> frozenset:
        shingles = self._trigrams.get(index)
        if shingles is None:
            words = self._tokens(index)
            shingles = self._trigrams[index] = frozenset(zip(words, words[1:], words[2:]))
        return shingles

    def last_user(self, before: int) -> int | None:
        found = last_message(self.messages, "user", before)
        return found[0] if found else None


#: Jaccard overlap of word trigrams above which a reply counts as an earlier reply repeated.
REPEAT_OVERLAP = 0.6
_QUESTION = re.compile(r"[^.!?\n]*\?")


def _statements(text: str) -> str:
    """The text without its questions: an offer ("shall I transfer you?") is not the act."""
    return _QUESTION.sub(" ", text) if "?" in text else text


def _succeeded_since_user(seen: _Seen, turn_index: int) -> bool:
    """Did a state-changing tool call succeed between the user's latest message and this turn?"""
    messages = seen.messages
    for index in range(turn_index - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user":
            return False
        if message.get("role") != "assistant":
            continue
        for call in seen.calls(index):
            if seen.kind(call["name"]) == "write" and seen.outcome(index, call["id"]) == "ok":
                return True
    return False
