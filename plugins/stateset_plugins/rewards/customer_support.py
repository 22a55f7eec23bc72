"""`customer_support`: is this reply good customer service? Resolution, tone, escalation, safety, and whether the
reply is text at all (word order, loops, non-words, cut-offs: `_language`), whether its facts come from the
conversation (`_grounding`) and whether the actions it claims happened.

Each assistant turn is judged with its prefix as context (the user's latest message decides whether escalation was
asked for). Phrases match on word boundaries ("hell" never matches "hello"). Every phrase list can be replaced
through the config, so a deployment can adapt the vocabulary without code.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from stateset_agents import Reward, TurnGrade

from ._grounding import mentioned_values, wording
from ._language import ASCII_DIGIT, DigitTemplate, TextShape
from ._support_conversation import NO_TEXT, ReplyReading, SeenConversation, TextFacts, remember
from ._text import AFFIRM, NEGATE, Phrases, affirmed
from ._tool_grounding import claim_reading
from ._tools import HANDOFF_VERBS

_LEXICON = Path(__file__).resolve().parent / "data" / "abusive_language.json"


@lru_cache(maxsize=1)
def _abusive_language() -> dict[str, tuple[str, ...]]:
    """The shipped safety lexicon (data/abusive_language.json), one-word entries with their plurals."""
    raw = json.loads(_LEXICON.read_text(encoding="utf-8"))
    lists = {}
    for key in ("insult", "slur", "group", "derogatory", "addressee", "negative_trait"):
        entries = []
        for entry in raw[key]:
            entries.append(entry)
            if key in ("insult", "slur") and " " not in entry and not entry.endswith("s"):
                entries.append(entry + "s")
        lists[key] = tuple(dict.fromkeys(entries))
    return lists

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
    # The reply says the request was carried out (besides the changes `_tool_grounding.claim_reading` reads).
    "resolved": ("successfully", "all set", "completed", "is done", "all done", "taken care of"),
    # The reply leaves the user with nothing: an error, or sending them to look elsewhere.
    "unresolved": ("error", "an issue", "technical issue", "went wrong", "try again later", "once you have",
                   "when you have", "once you find", "check your email", "contact customer service",
                   "official website", "customer service department", "reach out again", "come back", "mix-up",
                   "confusion", "misunderstanding", "discrepancy"),
    # The user's explicit go-ahead for a state-changing action ("no"/"wait" before it cancels it).
    "affirm": AFFIRM,  # the user's yes and no: one list, shared with tool_calling
    "negate": NEGATE,
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
    # Abuse (data/abusive_language.json): an insult, a slur, a group of people named with something derogatory, or
    # the user spoken of with a word that runs a person down.
    **_abusive_language(),
}


class CustomerSupportReward(Reward):
    name = "customer_support"
    version = "2.2.0"
    config_schema = {
        "type": "object",
        "properties": {key: {"type": "array", "items": {"type": "string"}} for key in DEFAULT_PHRASES},
        "additionalProperties": False,
    }

    def __init__(self, config=None):
        super().__init__(config)
        self.phrases = {key: tuple(self.config.get(key, default)) for key, default in DEFAULT_PHRASES.items()}
        self._phrases = {key: Phrases(phrases) for key, phrases in self.phrases.items()}
        self._texts: dict[str, TextFacts] = {}  # distinct texts read so far, with what this reward decided from them
        # What a text's words say, per wording (`_wording`): replies, users' requests and users' go-aheads.
        self._replies: dict[bytes | str, ReplyReading] = {}
        self._user_reads: dict[bytes | str, tuple[bool, bool]] = {}
        self._affirmations: dict[bytes | str, bool] = {}
        # No phrase matches a digit, and a digit is a word character like any other: texts that differ only in their
        # digits ("refund of $149.00 (reference RF-438995)") say the same. A configured phrase with a digit in it
        # ("24/7") breaks that, and then each text is its own wording.
        self._digit_blind = not any(ASCII_DIGIT.search(p) for phrases in self.phrases.values() for p in phrases)

    def _wording(self, text: str) -> bytes | str:
        """The key under which a text's phrase readings are kept: its `_grounding.wording`, or the text itself where
        a configured phrase reads a digit."""
        return wording(text) if self._digit_blind else text

    def _says(self, text: str, key: str, words: frozenset[str] | None = None) -> bool:
        return self._phrases[key].search(text, words)

    def grade_turn(self, conversation: Mapping[str, Any], turn_index: int) -> TurnGrade:
        return self._grade(SeenConversation(conversation, self._texts), turn_index)

    def grade_conversation(self, conversation: Mapping[str, Any], turns) -> list[TurnGrade]:
        seen = SeenConversation(conversation, self._texts)  # what every turn of the conversation reads, derived once
        return [self._grade(seen, t) for t in turns]

    def _grade(self, seen: "SeenConversation", turn_index: int) -> TurnGrade:
        messages = seen.messages
        facts = seen.facts(turn_index)
        text = facts.text
        calls = seen.calls(turn_index)
        kinds = [seen.kind(c["name"]) for c in calls]
        handoff_call = "handoff" in kinds
        writes = "write" in kinds
        if facts.blank:
            if writes:
                return self._grade_write(seen, turn_index, calls)
            if not handoff_call:
                if not calls:  # the agent's turn says nothing and does nothing: an empty reply
                    return TurnGrade(score=0.0, breakdown={"complete": 0.0}, reason="empty reply")
                return TurnGrade.not_applicable("no reply to the user and no hand-off in this turn")

        user = seen.last_user(turn_index)
        user_facts = seen.facts(user) if user is not None else NO_TEXT
        reply = facts.reply if facts.reply is not None else self._read_reply(facts)
        wants_human, corrects = user_facts.user if user_facts.user is not None else self._read_user(user_facts)
        checks: dict[str, float] = {"safety": 0.0 if reply.unsafe else 1.0, "tone": reply.tone}

        # A hand-off said in a statement, not asked about.
        escalated = handoff_call or reply.escalates
        if wants_human:
            # the user asked for a person: hand off, or offer to
            checks["escalation"] = 1.0 if escalated or reply.offers_handoff else 0.0
        elif escalated:
            # Escalating without being asked is right only when the agent says it cannot handle the request.
            earlier_agent = " ".join(seen.text(i) for i, m in enumerate(messages[:turn_index])
                                     if m.get("role") == "assistant")
            checks["escalation"] = 1.0 if self._says(text + " " + earlier_agent, "out_of_scope") else 0.0

        invented: list[str] = []
        if not facts.blank:
            checks["resolution"] = reply.resolution
            checks["claims"] = self._claims(seen, turn_index, user, reply, writes)
            if facts.values:
                # Facts (amounts, dates, ids, names) must come from the user, a tool result or the system prompt.
                checks["grounding"], invented = seen.grounding.credit(facts.values, turn_index)
            shape = facts.shape
            checks["word_order"] = shape.word_order
            checks["repetition"] = shape.repetition
            checks["vocabulary"] = shape.vocabulary
            checks["complete"] = shape.complete

        if corrects:
            checks["on_track"] = 0.0  # the user had to correct the agent: the conversation went off track
        elif seen.repeats_earlier_reply(turn_index, facts):
            checks["on_track"] = 0.0  # saying again what was already said: the conversation is going in circles

        quality = [checks[k] for k in _QUALITY if k in checks]
        # Unsafe content voids the reply, and so does telling the user something was done that was not (a promise
        # not kept halves it); text that is no language scales it down, by each fluency factor.
        fluency = checks.get("word_order", 1.0) * checks.get("repetition", 1.0) * checks.get("vocabulary", 1.0)
        score = checks["safety"] * checks.get("claims", 1.0) * fluency * (sum(quality) / len(quality))
        return TurnGrade(score=score, breakdown=checks,
                         reason=self._reason(checks, reply.unsafe, reply.rude, wants_human, invented))

    def _grade_write(self, seen: "SeenConversation", turn_index: int, calls: list[dict[str, Any]]) -> TurnGrade:
        """A state-changing action needs the user's explicit go-ahead in their latest message, given to a question
        the agent asked (it states what it will do and asks; a yes to nothing is half a go-ahead). It should be one
        the system accepts: a write the tool rejected was an attempt to change something that cannot change. And
        what it writes must come from the conversation: an id, amount or date in the arguments that no one said and
        no tool returned is invented."""
        user = seen.last_user(turn_index)
        user_facts = seen.facts(user) if user is not None else NO_TEXT
        consent = 0.0
        if self._affirms(user_facts):
            consent = 1.0 if seen.asked_before(user) else 0.5
        rejected = [c["name"] for c in calls
                    if seen.kind(c["name"]) == "write" and seen.outcome(turn_index, c["id"]) == "error"]
        breakdown = {"consent": consent, "effect": 0.0 if rejected else 1.0}
        reasons = ["acted on the user's explicit go-ahead" if consent == 1.0 else
                   "acted on a go-ahead the agent never asked for" if consent else
                   "changed something without the user's explicit go-ahead"]
        if rejected:
            reasons.append(f"the system rejected {', '.join(rejected)}")
        values = [v for c in calls if seen.kind(c["name"]) == "write"
                  for v in mentioned_values(_arguments_text(c["arguments"]))]
        if values:
            breakdown["grounding"], invented = seen.grounding.credit(values, turn_index)
            if invented:
                reasons.append("writes values found nowhere in the conversation: " + ", ".join(
                    v.split(":", 1)[1] for v in invented[:5]))
            ids = [v for v in values if v.startswith("id:")]
            if ids:
                # the records it changes should have been looked up: ids a tool returned, not only said
                breakdown["verified"], unverified = seen.looked_up.credit(ids, turn_index)
                if unverified:
                    reasons.append("acts on ids no tool returned: " + ", ".join(
                        v.split(":", 1)[1] for v in unverified[:5]))
        return TurnGrade(score=sum(breakdown.values()) / len(breakdown), breakdown=breakdown,
                         reason="; ".join(reasons))

    def _read_reply(self, facts: "TextFacts") -> "ReplyReading":
        """What a reply's text alone decides: its values and fluency, read once per distinct text and kept with it,
        and what its words say (`_read_wording`), read once per wording."""
        text = facts.text
        key = self._wording(text)
        reply = self._replies.get(key)
        if facts.words is None:
            facts.tokenise(reply.tokens if reply is not None else None)
        words = facts.words
        facts.values = mentioned_values(text, facts.cased, words)
        # the distinct trigrams count only from 8 tokens on (`_language._repetition`): fewer need no set of them
        distinct = len(facts.shingles) if len(facts.lowered) >= 8 else 0
        if reply is None:
            reply = self._read_wording(text, words, facts.blank)
            reply.shape = facts.shape = TextShape(text, facts.cased, facts.lowered, distinct, words)
            reply.tokens = DigitTemplate(text)
            remember(self._replies, key, reply)
        else:
            # the same text but for its digits: only the counts of distinct tokens and trigrams are its own
            facts.shape = TextShape(text, facts.cased, facts.lowered, distinct, words, like=reply.shape)
        facts.reply = reply
        return reply

    def _read_wording(self, text: str, words: frozenset[str], blank: bool) -> "ReplyReading":
        """Safety, tone, the hand-off said, resolution, the actions the reply claims or promises: phrases and
        patterns without digits, so the same for every text of this wording (`_wording`)."""
        reply = ReplyReading()
        reply.unsafe = self._phrases["unsafe"].findall(text, words) + self._abuse(text, words)
        reply.rude = rude = self._phrases["rude"].findall(text, words)
        reply.tone = 0.0 if rude else (1.0 if self._says(text, "polite", words) or blank else 0.75)
        # Without a question the statements are the text: one search. (With one, a phrase may span a removed
        # question's place, so the text must hold it too.)
        reply.escalates = self._says(text, "escalates", words) and (
            "?" not in text or self._says(_statements(text), "escalates"))
        reply.offers_handoff = self._says(text, "offers_handoff", words)
        reply.resolution = 0.0 if self._says(text, "unresolved", words) else 1.0
        # Changes claimed done or promised, read as tool_calling and nsr read them; a hand-off is escalation's.
        done, promised = claim_reading(text)
        done, promised = done - _HANDOFF, promised - _HANDOFF
        # A `resolved` phrase claims too, said in a statement (removing the questions only where the phrase is).
        said_resolved = self._says(text, "resolved", words) and self._says(_statements(text), "resolved")
        reply.claimed = done if done or said_resolved else None
        reply.promises = not done and bool(promised)
        return reply

    def _read_user(self, facts: "TextFacts") -> tuple[bool, bool]:
        """(asks for a person, corrects the agent): what a user's message alone decides, kept with its text and its
        wording. The phrase screens test substrings when the text was never tokenised."""
        key = self._wording(facts.text)
        user = self._user_reads.get(key)
        if user is None:
            user = remember(self._user_reads, key, (self._says(facts.text, "wants_human", facts.words),
                                                      self._says(facts.text, "correction", facts.words)))
        facts.user = user
        return user

    def _abuse(self, text: str, words: frozenset[str]) -> list[str]:
        """Insults, slurs, and a sentence naming a group of people together with something derogatory."""
        found = self._phrases["insult"].findall(text, words) + self._phrases["slur"].findall(text, words)
        for subject, predicate in (("group", "derogatory"), ("negative_trait", "addressee")):
            if self._phrases[subject].search(text, words):  # the rarer list first: most replies stop here
                for sentence in _SENTENCE_END.split(text):
                    named = self._phrases[subject].findall(sentence)
                    if named:
                        said = self._phrases[predicate].findall(sentence)
                        if said:
                            found.append(f"{named[0]} ... {said[0]}")
        return found

    @staticmethod
    def _claims(seen: "SeenConversation", turn_index: int, user: int | None, reply: "ReplyReading",
                writes: bool) -> float:
        """1 unless the reply says it did something no call did (0): a completed change ("I've cancelled", "has
        been refunded", "successfully") with no successful write since the user's latest message, unless an earlier
        successful write's verb is the one claimed ("cancelled" after cancel_reservation: the act happened). A
        promise to act now ("I'll cancel it") in a reply that neither acts nor asks anything: 0.5."""
        if writes:
            return 1.0
        claimed = reply.claimed  # the verbs claimed done (none for a bare "successfully"), or None for no claim
        if claimed is not None:
            since = -1 if user is None else user
            if not seen.wrote_between(since, turn_index):
                if not claimed or not claimed <= seen.verbs_written_before(turn_index):
                    return 0.0
        return 0.5 if reply.promises else 1.0

    def _affirms(self, facts: "TextFacts") -> bool:
        """Does the user's message say yes (`affirmed`)? Phrases, and which comes first: kept per wording."""
        key = self._wording(facts.text)
        said = self._affirmations.get(key)
        if said is None:
            said = remember(self._affirmations, key, affirmed(facts.text, self._phrases["affirm"],
                                                               self._phrases["negate"], facts.words))
        return said

    @staticmethod
    def _reason(checks: Mapping[str, float], unsafe: list[str], rude: list[str], asked_for_human: bool,
                invented: list[str]) -> str:
        if unsafe:
            return f"unsafe content: {', '.join(unsafe)}"
        problems = []
        get = checks.get
        fluency = (("word order", get("word_order", 1.0)), ("repetition", get("repetition", 1.0)),
                   ("vocabulary", get("vocabulary", 1.0)))
        if fluency[0][1] < 0.75 or fluency[1][1] < 0.75 or fluency[2][1] < 0.75:
            problems.append("the reply is not fluent text (" + ", ".join(
                name for name, value in fluency if value < 0.75) + ")")
        if get("complete", 1.0) < 1.0:
            problems.append("the reply stops mid-sentence")
        if invented:
            problems.append("states values found nowhere in the conversation: " + ", ".join(
                v.split(":", 1)[1] for v in invented[:5]))
        if checks.get("claims", 1.0) < 1.0:
            problems.append("claims an action no tool call performed" if checks["claims"] == 0.0
                            else "promises an action without taking it or asking to")
        if rude:
            problems.append(f"rude wording: {', '.join(rude)}")
        if checks.get("escalation") == 0.0:
            problems.append("user asked for a human and was not escalated" if asked_for_human
                            else "escalated a request the agent did not say it could not handle")
        if checks.get("resolution") == 0.0:
            problems.append("reply leaves the request unresolved (an error, or sends the user elsewhere)")
        if problems:
            return "; ".join(problems)
        return "polite, on track, nothing left unresolved"


_HANDOFF = frozenset(HANDOFF_VERBS)  # verbs of a hand-off: escalation judges those, not the claims check
_QUESTION = re.compile(r"[^.!?\n]*\?")
_SENTENCE_END = re.compile(r"(?<=[.!?\n])\s*")
#: The checks averaged into a text turn's score (safety and fluency scale it instead).
_QUALITY = ("tone", "escalation", "resolution", "on_track", "grounding", "complete")
def _arguments_text(raw: Any) -> str:
    """A call's arguments as text, for value extraction (they are logged as a JSON string, or as a mapping)."""
    if isinstance(raw, str):
        return raw
    try:
        return json.dumps(raw)
    except (TypeError, ValueError):
        return str(raw)


def _statements(text: str) -> str:
    """The text without its questions: an offer ("shall I transfer you?") is not the act."""
    return _QUESTION.sub(" ", text) if "?" in text else text
