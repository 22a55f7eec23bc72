"""`nsr`: the agent's decisions judged against a declarative (symbolic) policy, evaluated locally.

The code knows no domain. The policy file names the tools that write or hand off, the facts (expressions over tool
results, tool arguments and what the user said) and the rules (on a `decision`, `when` a condition holds,
`require` a condition). Each assistant turn is judged with its prefix as context: every rule triggered by a decision
in the turn is kept or broken, and the policy's `scoring` makes the turn's score of them (the kept share, all kept,
or halved per breach). The language: docs/policy-language.md.
"""
from __future__ import annotations

import re
import threading
from bisect import bisect_left
from collections.abc import Mapping  # not typing's: its isinstance checks are several times slower
from functools import lru_cache, partial
from typing import Any, Callable, Sequence

from stateset_agents import Reward, TurnGrade
from stateset_agents.core.errors import InputError
from stateset_agents.plugin_api.text import message_text

from ._text import (affirmed, has_phrase, is_error_data, is_error_result, parse_arguments, parse_json_maybe, phrases,
                    tool_calls, tool_result_index, word_tokens)
from ._tool_grounding import claim_reading
from ._tools import declared_tools
from .policy_language import UNKNOWN, Evaluator, fits_schema, flatten, matches, pattern
from .policy_loading import load_policy


class NSRReward(Reward):
    name = "nsr"
    version = "1.3.0"
    config_schema = {
        "type": "object",
        "properties": {"policy": {"type": "object", "description": "The parsed policy file (YAML or JSON)."}},
        "required": ["policy"],
    }

    @classmethod
    def example_config(cls) -> dict[str, Any]:
        """The shipped airline policy: what the conformance suite and a first try can use."""
        from importlib import resources

        import yaml

        text = resources.files("stateset_plugins.rewards").joinpath("policies/airline.yaml").read_text()
        return {"policy": yaml.safe_load(text)}

    def __init__(self, config=None):
        # Check the policy first: its errors (missing policy, a YAML `on:` key read as true, a bad expression)
        # say more than the generic config checks would.
        policy = load_policy((config or {}).get("policy"))
        super().__init__(config)
        self.policy = policy

        self._rules_by_call: dict[str, list[dict[str, Any]]] = {}
        self._contexts = threading.local()  # one context per thread, reused conversation after conversation

    def _context(self, conversation: Mapping[str, Any]) -> "_Context":
        context = getattr(self._contexts, "context", None)
        if context is None:
            context = self._contexts.context = _Context(self.policy)
        return context.start(_Conversation(conversation.get("messages") or [], conversation.get("tools")))

    def grade_turn(self, conversation: Mapping[str, Any], turn_index: int) -> TurnGrade:
        return self._grade(self._context(conversation).at(turn_index))

    def grade_conversation(self, conversation: Mapping[str, Any], turns) -> list[TurnGrade]:
        # texts, calls and results are derived once for all the conversation's turns
        context = self._context(conversation)
        return [self._grade(context.at(t)) for t in turns]

    def _rules_for(self, decision: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The rules a decision triggers. Which rules a call can trigger depends only on its tool name, and which a
        turn or refusal can, on its kind (a refusal's `mentions` still read its text), so the candidates are kept."""
        kind = decision["kind"]
        # a turn's candidates depend on whether it says something (`reply` rules judge only turns with text)
        key = (decision["call"] if kind == "call"
               else f"\0{kind}{decision['turn']['has_text'] if kind == 'turn' else ''}")
        rules = self._rules_by_call.get(key)
        if rules is None:
            rules = self._rules_by_call[key] = [r for r in self.policy["rules"]
                                                if r["decision"]["kind"] in _KINDS_FOR[kind]
                                                and (kind == "refusal" or _triggers(r["decision"], decision,
                                                                                     self.policy))]
        if decision["kind"] == "refusal":
            return [r for r in rules if _triggers(r["decision"], decision, self.policy)]
        return rules

    def _grade(self, context: "_Context") -> TurnGrade:
        verdicts: list[dict[str, Any]] = []
        for decision in context.decisions():
            for rule in self._rules_for(decision):
                verdict = context.judge(rule, decision)
                if verdict == "kept" and rule["counts"] == "when_broken":
                    verdict = None  # keeping a standing prohibition is no evidence of a good decision
                if verdict is not None:
                    verdicts.append({"rule": rule["id"], "decision": decision["label"], "verdict": verdict,
                                     "weight": rule["weight"], "says": rule["says"], "voids": rule["voids"]})
        if not verdicts:
            return TurnGrade.not_applicable("no policy rule applies to this turn's decisions")
        total = sum(v["weight"] for v in verdicts)
        kept = sum(v["weight"] for v in verdicts if v["verdict"] == "kept")
        breakdown: dict[str, Any] = {f"{v['rule']}@{v['decision']}": v["verdict"] for v in verdicts}
        # Each rule judged in the turn as a number at the top level (1 kept, 0 broken by any of the turn's
        # decisions): the checks `improve calibrate` can weigh; a rule the turn did not judge is absent.
        for v in verdicts:
            kept_so_far = breakdown.get(v["rule"], 1.0)
            breakdown[v["rule"]] = min(kept_so_far, 1.0 if v["verdict"] == "kept" else 0.0)
        scoring = self.policy["scoring"]
        if any(v["voids"] and v["verdict"] == "broken" for v in verdicts):
            score = 0.0  # a breach that is no matter of degree (a falsehood told the user): the turn is void
        elif scoring == "all_kept":  # a decision complies or it does not
            score = 0.0 if any(v["verdict"] == "broken" for v in verdicts) else 1.0
        elif scoring == "per_breach":  # complies (1), else each breach (by weight) multiplies by the factor
            score = self.policy["breach_factor"] ** (total - kept)
        else:
            score = kept / total if total else 1.0
        return TurnGrade(score=score, breakdown=breakdown, reason=_reason(verdicts))


def _reason(verdicts: Sequence[Mapping[str, Any]]) -> str:
    broken = [v for v in verdicts if v["verdict"] == "broken"]
    if broken:
        first = broken[0]
        more = f" (+{len(broken) - 1} more broken)" if len(broken) > 1 else ""
        return f"broke {first['rule']} on {first['decision']}: {first['says']}{more}".strip()
    return "kept " + ", ".join(dict.fromkeys(v["rule"] for v in verdicts))


#: The rule kinds (`decision:`) that can trigger on each kind of decision.
_KINDS_FOR = {"turn": ("turn", "reply"), "refusal": ("refusal",), "call": ("tool_call", "write", "handoff", "call")}


def _triggers(on: Mapping[str, Any], decision: Mapping[str, Any], policy: Mapping[str, Any]) -> bool:
    kind = on["kind"]
    if kind == "turn":
        return decision["kind"] == "turn"
    if kind == "reply":  # the turn, when it says something to the user
        return decision["kind"] == "turn" and decision["turn"]["has_text"]
    if kind == "refusal":
        if decision["kind"] != "refusal":
            return False
        return not on.get("mentions") or has_phrase(decision["text"], _expand(on["mentions"], policy["words"]))
    if decision["kind"] != "call":
        return False
    name = decision["call"]
    return {"tool_call": True, "write": name in policy["writes"], "handoff": name in policy["handoffs"],
            "call": name in on.get("tools", ())}[kind]


def _expand(phrases: Sequence[Any], words: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """A phrase that names a `words:` list stands for that list (`user_said('wants_human')`)."""
    out: list[str] = []
    for phrase in phrases:
        out.extend(words.get(phrase, (phrase,)) if isinstance(phrase, str) else ())
    return tuple(out)


class _Conversation:
    """One conversation's messages with what judging reads from them (texts, tool calls with parsed
    arguments, parsed tool results), each derived once and kept for the conversation's other turns: the texts
    at once (nearly every one is read, most are plain strings), the rest on first use."""

    __slots__ = ("messages", "tools", "by_role", "texts", "_calls", "_results", "_holding", "_spoken", "_successful",
                 "_declared", "confirmations", "_first", "_tokens", "_lower")

    def __init__(self, messages: Sequence[Mapping[str, Any]], tools: Any = None):
        self.messages = messages
        self.tools = tools
        self._declared: dict[str, Mapping[str, Any]] | None = None
        self.confirmations: dict[int, bool] = {}  # user message index -> does it say yes (`user_confirmed`)
        self._first: dict[tuple[str, str], float] = {}  # (role, value) -> the first message holding it
        self._tokens: dict[int, frozenset[str]] = {}  # message index -> its word tokens
        self._lower: dict[int, str | None] = {}  # message index -> its text lower-cased
        self.by_role: dict[str, list[int]] = {"user": [], "assistant": [], "tool": []}
        self.texts: list[str] = []  # message_text of each message
        for index, message in enumerate(messages):
            indices = self.by_role.get(message.get("role"))
            if indices is not None:
                indices.append(index)
            content = message.get("content")
            self.texts.append(content if type(content) is str else "" if content is None else message_text(message))
        self._calls: dict[int, list[tuple[dict[str, Any], Any]]] = {}
        self._results: dict[int, Any] = {}
        self._holding: dict[tuple[str, tuple[str, ...]], list[int]] = {}
        self._spoken: dict[str, list[int]] = {}
        self._successful: list[tuple[int, str, dict[str, Any], int]] | None = None

    def successful_calls(self) -> list[tuple[int, str, dict[str, Any], int]]:
        """(assistant index, tool name, parsed arguments, answer index) of every call that got a non-error answer,
        in conversation order. A call's answer comes before the next assistant message, so it is in the prefix of
        every later turn."""
        if self._successful is None:
            made = []
            for index in self.by_role["assistant"]:
                for call, arguments in self.calls(index):
                    if arguments is None:
                        continue
                    answer = tool_result_index(self.messages, call["id"], index + 1)
                    if answer is not None and not self.errored(answer):
                        made.append((index, call["name"], arguments, answer))
            self._successful = made
        return self._successful

    def errored(self, index: int) -> bool:
        """`is_error_result` of tool message `index`, with a JSON object's parse kept as the message's `result` (the
        text is what `is_error_result` would parse: it has no leading space, so it cannot start with "Error")."""
        text = self.texts[index]
        return is_error_data(self.result(index)) if text.startswith("{") else is_error_result(text)

    def holding(self, role: str, words: tuple[str, ...]) -> list[int]:
        """The indices of the messages of `role` that hold one of the phrases, in order: found once for the whole
        conversation, so "did the user say X before turn t" is a bisect for every turn."""
        key = (role, words)
        found = self._holding.get(key)
        if found is None:
            search, screen = _matcher(words)
            found = self._holding[key] = [] if search is None else [
                i for i in self.by_role[role] if self._holds(i, search, screen)]
        return found

    def first_holding(self, role: str, value: str) -> float:
        """The index of the first message of `role` that holds `value` word-bounded (as `says` would find it),
        else infinity. For a value without spaces, a message whose lower-cased text lacks it is passed over
        without a regex search (most values, ids and codes, appear in few messages)."""
        key = (role, value)
        found = self._first.get(key)
        if found is None:
            search, found = _matcher((value,))[0], _NEVER
            wanted = value.lower() if value.isascii() and not _SPACE.search(value) else None
            for i in self.by_role[role] if search is not None else ():
                if wanted is not None:
                    lowered = self._lowered(i)
                    if lowered is not None and wanted not in lowered:
                        continue
                if search(self.texts[i]) is not None:
                    found = i
                    break
            self._first[key] = found
        return found

    def _lowered(self, index: int) -> str | None:
        """Message `index` lower-cased, once (None for a text with non-ASCII characters: `lower` is no case fold)."""
        try:
            return self._lower[index]
        except KeyError:
            text = self.texts[index]
            lowered = self._lower[index] = text.lower() if text.isascii() else None
            return lowered

    def tokens(self, index: int) -> frozenset[str]:
        """The lower-cased word tokens of message `index`, found once."""
        found = self._tokens.get(index)
        if found is None:
            found = self._tokens[index] = frozenset(word_tokens(self.texts[index]))
        return found

    def spoken(self, role: str) -> list[int]:
        """The indices of the messages of `role` with text (an agent's tool-call-only turns say nothing)."""
        found = self._spoken.get(role)
        if found is None:
            texts = self.texts
            found = self._spoken[role] = [i for i in self.by_role[role] if texts[i].strip()]
        return found

    def fits_declaration(self, name: str, arguments: Any) -> Any:
        """Does a call name a declared tool, with arguments that validate against its `parameters` JSON schema?
        UNKNOWN when the conversation declares no tools (nothing to check against)."""
        if self._declared is None:
            self._declared = declared_tools({"tools": self.tools})
        if not self._declared:
            return UNKNOWN
        declaration = self._declared.get(name)
        if declaration is None or not isinstance(arguments, Mapping):
            return False
        return fits_schema(declaration.get("parameters") or {"type": "object"}, arguments)

    def says(self, index: int, words: tuple[str, ...]) -> bool:
        """Does message `index` contain one of the phrases (word-bounded, case-insensitive)? `Phrases.search`,
        with its screen a set test against the message's word tokens, found once per message."""
        search, screen = _matcher(words)
        return search is not None and self._holds(index, search, screen)

    def _holds(self, index: int, search: Callable[[str], Any], screen: frozenset[str] | None) -> bool:
        text = self.texts[index]
        if screen is not None and text.isascii() and screen.isdisjoint(self.tokens(index)):
            return False  # a phrase matches only where its longest word is one of the text's words
        return search(text) is not None

    def calls(self, index: int) -> Sequence[tuple[dict[str, Any], Any]]:
        """(call, parsed arguments or None) for each tool call of message `index`."""
        if not self.messages[index].get("tool_calls"):
            return ()  # most turns: nothing to parse or keep
        calls = self._calls.get(index)
        if calls is None:
            calls = self._calls[index] = [(call, parse_arguments(call["arguments"])[0])
                                          for call in tool_calls(self.messages[index])]
        return calls

    def result(self, index: int) -> Any:
        """The parsed content of tool message `index` (JSON as data, else the text)."""
        if index not in self._results:
            self._results[index] = parse_json_maybe(self.texts[index])
        return self._results[index]


class _Context:
    """Facts visible at one assistant turn (`at`): the prefix only (plus, for calls, whether they errored). One
    context serves one thread's conversations (`start`) and their turns in turn, so its function table and the
    expansions of word-list names are built once."""

    def __init__(self, policy: Mapping[str, Any]):
        self.policy = policy
        self.words = policy["words"]
        self.decision: Mapping[str, Any] = {}
        self._facts: dict[str, Any] = {}
        self._matches: dict[Any, list[str]] = {}
        self._expanded: dict[tuple[str, ...], tuple[str, ...]] = {}  # word-list names -> their phrases
        self._evaluator = Evaluator(self._resolve, self._functions())
        # A decision of a kind no rule judges gets no verdict: not deriving it saves, e.g., a phrase search of
        # every reply for refusals when the policy has no rule about refusals.
        kinds = {rule["decision"]["kind"] for rule in policy["rules"]}
        self._judged = {decision for decision, triggers in _KINDS_FOR.items() if kinds.intersection(triggers)}
        self._refusal = phrases(self.words.get("refusal", ()))
        self._affirm, self._negate = phrases(self.words.get("affirm", ())), phrases(self.words.get("negate", ()))

    def start(self, seen: _Conversation) -> "_Context":
        self.seen = seen
        self.messages = seen.messages
        return self

    def at(self, turn_index: int) -> "_Context":
        self.turn_index = turn_index
        self._matches: dict[Any, list[str]] = {}  # this turn's regex matches, shared by the rules that ask
        return self

    # ------------------------------------------------------------------------------------------- decisions
    def decisions(self) -> list[dict[str, Any]]:
        index, judged = self.turn_index, self._judged
        calls = self.seen.calls(index)
        text = self.seen.texts[index]
        has_text = bool(text.strip())
        shape = {"tool_calls": len(calls), "has_text": has_text, "text": text}
        found = []
        if "turn" in judged:
            found.append({"kind": "turn", "label": "turn", "turn": shape, "args": {}, "call": None, "text": text})
        if "call" in judged:
            for call, arguments in calls:
                found.append({"kind": "call", "label": call["name"], "call": call["name"], "turn": shape,
                              "args": arguments if arguments is not None else UNKNOWN, "text": text,
                              "call_id": call["id"]})
        if "refusal" in judged and has_text and self._refusal.search(text):
            found.append({"kind": "refusal", "label": "refusal", "turn": shape, "args": {}, "call": None,
                          "text": text})
        return found

    # ---------------------------------------------------------------------------------------------- judging
    def judge(self, rule: Mapping[str, Any], decision: Mapping[str, Any]) -> str | None:
        if decision is not self.decision:  # what `args`, `turn_says` and the like read while it is judged
            self.decision = decision
            # A fact depends on the decision and its prefix, never on the rule asking (it sees no comprehension
            # variable), so each is evaluated at most once per decision, whichever rules read it.
            self._facts = {}
        evaluator = self._evaluator  # at the top level no comprehension variable is in scope: run directly
        if rule["when"] is not None:
            applies = rule["when"].run(evaluator)
            if applies is UNKNOWN or not applies:
                return None
        outcome = rule["require"].run(evaluator)
        if outcome is UNKNOWN:
            return None if rule["if_unknown"] == "skip" else rule["if_unknown"]
        return "kept" if outcome else "broken"

    def _resolve(self, name: str) -> Any:
        if name in ("args", "call", "turn"):
            return self.decision[name]
        if name == "user_confirmed":
            return self._user_confirmed()
        if name == "call_failed":
            return self._call_failed()
        if name == "call_repeated":
            return self._call_repeated()
        if name == "call_fits_declaration":
            decision = self.decision
            if decision.get("kind") != "call":
                return UNKNOWN
            return self.seen.fits_declaration(decision["call"], decision["args"])
        if name in self.policy["constants"]:
            return self.policy["constants"][name]
        if name in self.policy["facts"]:
            facts = self._facts
            if name not in facts:
                facts[name] = UNKNOWN  # a fact that refers to itself stays unknown instead of looping
                facts[name] = self._evaluator.evaluate(self.policy["facts"][name])
            return facts[name]
        raise InputError(f"policy expression uses {name!r}, which is neither a fact, a constant nor a built-in "
                         "name (args, call, turn, user_confirmed, call_failed, call_repeated, call_fits_declaration)",
                         field="policy")

    def _functions(self) -> Mapping[str, Callable[..., Any]]:
        """The context's functions (with the built-in ones, once per context: per thread); those about "this turn"
        read `self.turn_index` and `self.decision`."""
        return {
            "result": self._result,
            "called": lambda tool: self._result(tool) is not UNKNOWN,
            "args_of": lambda tool, **match: self._result(tool, _want="arguments", **match),
            "results_of": self._results_of,
            "records_of": self._records_of,
            # partials, not lambdas: these run for nearly every turn, and a partial adds no Python call
            "user_said": partial(self._said_before, "user"),
            "user_said_last": partial(self._said_last, "user"),
            "agent_said": partial(self._said_before, "assistant"),
            "agent_said_last": partial(self._said_last, "assistant"),
            "turn_says": lambda *p: self.seen.says(self.turn_index, self._expand(p)),
            "turn_matches": self._turn_matches,
            "seen": self._seen,
            "calls_since_user": self._calls_since_user,
            "turn_claims": lambda: sorted(claim_reading(self.seen.texts[self.turn_index])[0]),  # the changes done
        }

    # ------------------------------------------------------------------------------------------------ facts
    def _said_before(self, role: str, *phrases_or_lists: Any) -> bool:
        """Does some message of `role` in the prefix hold a phrase?"""
        return self._holds_before(role, self._expand(phrases_or_lists))

    def _said_last(self, role: str, *phrases_or_lists: Any) -> bool:
        """Does the latest message of `role` with text in the prefix hold a phrase?"""
        holding = self.seen.holding(role, self._expand(phrases_or_lists))
        last = self._last_index(role)
        if last is None:
            return False
        position = bisect_left(holding, last)
        return position < len(holding) and holding[position] == last

    def _expand(self, phrases_or_lists: tuple[Any, ...]) -> tuple[str, ...]:
        """`_expand` of a call's arguments. Only calls that name word lists are kept (the policy's own names, so the
        cache stays small however many conversations the context serves); other arguments (a name from a result, a
        list) are expanded each time."""
        try:
            words = self._expanded.get(phrases_or_lists)
        except TypeError:  # an unhashable argument: never a word-list name
            return _expand(phrases_or_lists, self.words)
        if words is None:
            words = _expand(phrases_or_lists, self.words)
            lists = self.words
            if all(isinstance(p, str) and p in lists for p in phrases_or_lists):
                self._expanded[phrases_or_lists] = words
        return words

    def _holds_before(self, role: str, words: tuple[str, ...]) -> bool:
        holding = self.seen.holding(role, words)
        return bool(holding) and holding[0] < self.turn_index

    def _seen(self, value: Any) -> Any:
        """Did `value` appear (word-bounded, case-insensitive) in a tool result or a user message of the prefix?
        What the agent may state as a fact is what the user or the tools provided."""
        if value is UNKNOWN or value is None:
            return UNKNOWN
        wanted = str(value)
        return any(self.seen.first_holding(role, wanted) < self.turn_index for role in ("tool", "user"))

    def _call_failed(self) -> Any:
        """Did the system reject this decision's call (its own result is an error)? UNKNOWN for a call the log
        holds no answer to, and for a decision that is no call. The one later message judging reads."""
        decision = self.decision
        if decision.get("kind") != "call":
            return UNKNOWN
        answer = tool_result_index(self.messages, decision["call_id"], self.turn_index + 1)
        return UNKNOWN if answer is None else self.seen.errored(answer)

    def _calls_since_user(self, tool: str | Sequence[str] | None = None, succeeded: bool = False) -> int:
        """How many tool calls (to `tool`, or any tool when none is named) the agent made after the user's latest
        message and before this turn: what it did with the user's last words. Whatever their result, or with
        `succeeded=true` only those that took effect."""
        tools = None if tool is None else ({tool} if isinstance(tool, str) else set(tool))
        last_user = self._last_index("user")
        start = -1 if last_user is None else last_user
        if succeeded:
            made = self.seen.successful_calls()
            since = made[bisect_left(made, (start,)):bisect_left(made, (self.turn_index,))]
            return sum(1 for _, name, _, _ in since if tools is None or name in tools)
        assistants = self.seen.by_role["assistant"]
        return sum(1 for index in assistants[bisect_left(assistants, start):bisect_left(assistants, self.turn_index)]
                   for call, _ in self.seen.calls(index) if tools is None or call["name"] in tools)

    def _call_repeated(self) -> Any:
        """Is this decision's call the same tool with the same arguments as an earlier call of the prefix, whatever
        that one's result (the change made twice, or a retry that changes nothing)? UNKNOWN for no call."""
        decision = self.decision
        if decision.get("kind") != "call" or decision["args"] is UNKNOWN:
            return UNKNOWN
        name, arguments = decision["call"], decision["args"]
        assistants = self.seen.by_role["assistant"]
        return any(call["name"] == name and earlier == arguments
                   for index in assistants[:bisect_left(assistants, self.turn_index)]
                   for call, earlier in self.seen.calls(index))

    def _last_index(self, role: str) -> int | None:
        """The latest message of `role` in the prefix: the user's latest message, even one without text (it says
        nothing, so no phrase); the agent's latest that says something (its tool-call-only turns say nothing)."""
        latest = self.seen.by_role["user"] if role == "user" else self.seen.spoken(role)
        position = bisect_left(latest, self.turn_index)
        return latest[position - 1] if position else None

    def _user_confirmed(self) -> bool:
        """The latest user message says yes (an `affirm` word) and does not say no (`negate`) before it."""
        index = self._last_index("user")
        if index is None:
            return False
        confirmed = self.seen.confirmations.get(index)
        if confirmed is None:  # read once per user message: every write and turn after it asks again
            confirmed = self.seen.confirmations[index] = affirmed(self.seen.texts[index], self._affirm, self._negate)
        return confirmed

    def _turn_matches(self, regex: Any) -> list[str]:
        """The distinct matches of a regular expression in this turn's text, found once per turn."""
        try:
            return self._matches[regex]
        except KeyError:
            found = self._matches[regex] = _regex_matches(regex, self.seen.texts[self.turn_index])
            return found
        except TypeError:  # an unhashable argument
            return _regex_matches(regex, self.seen.texts[self.turn_index])

    def _successful_calls(self, tool: str | Sequence[str], match: Mapping[str, Any]):
        """(arguments, parsed result) of each successful call to `tool` (or any tool in a list) in the prefix whose
        arguments equal `match`, latest first. A failed call (no answer, or an error result) established nothing."""
        tools = {tool} if isinstance(tool, str) else set(tool)
        made = self.seen.successful_calls()
        for index, name, arguments, answer in reversed(made[:bisect_left(made, (self.turn_index,))]):
            if name in tools and _arguments_match(arguments, match):
                yield arguments, self.seen.result(answer)

    def _result(self, tool: str | Sequence[str], _want: str = "result", **match: Any) -> Any:
        """The latest successful result of `tool` (or of any tool in a list) in the prefix whose call arguments
        equal `match`, as data. A list lets a write's result (the updated record) count as the latest state.
        `_want="arguments"`: that call's own arguments instead (what a write set, when its result does not echo it)."""
        for arguments, result in self._successful_calls(tool, match):
            return arguments if _want == "arguments" else result
        return UNKNOWN

    def _results_of(self, tool: str | Sequence[str], **match: Any) -> list[Any]:
        """Every successful result of `tool` matching the arguments, latest first (an empty list when none)."""
        return [result for _, result in self._successful_calls(tool, match)]

    def _records_of(self, tool: str | Sequence[str], **match: Any) -> list[Any]:
        """The records (mappings, at any list depth) of every successful result of `tool`, latest call first. Each
        record carries its call's arguments for the fields it lacks: what a call asked for is the context of what
        it returned (a search by date returns records on that date, whether or not they repeat it)."""
        records = []
        for arguments, result in self._successful_calls(tool, match):
            for record in flatten(result):
                if isinstance(record, Mapping):
                    records.append({**arguments, **record})
        return records


_SPACE = re.compile(r"\s")
_NEVER = float("inf")


@lru_cache(maxsize=4096)
def _matcher(words: tuple[str, ...]) -> tuple[Callable[[str], Any] | None, frozenset[str] | None]:
    """A phrase list's regex search (`phrases`; None for an empty list) and the screen `Phrases` applies: a phrase
    can only match a text holding its longest word (lower-cased); no screen where a phrase is not ASCII or has no
    word (Unicode case folding is wider than `lower`)."""
    pattern = phrases(words).pattern
    cleaned = [p.strip() for p in words if isinstance(p, str) and p.strip()]
    longest = [max(word_tokens(p), key=len, default="") for p in cleaned]
    screen = frozenset(longest) if all(p.isascii() for p in cleaned) and all(longest) else None
    return (None if pattern is None else pattern.search), screen


def _regex_matches(regex: Any, text: str) -> list[str]:
    """The distinct matches of a regular expression (from the policy file) in a text, in order."""
    return list(dict.fromkeys(m.group(0) for m in pattern(regex).finditer(text)))


def _arguments_match(arguments: Mapping[str, Any], match: Mapping[str, Any]) -> bool:
    return matches(arguments, match)
