"""`nsr`: the agent's decisions judged against a declarative (symbolic) policy, evaluated locally.

The code knows no domain. The policy file names the tools that write or hand off, the facts (expressions over tool
results, tool arguments and what the user said) and the rules (on a `decision`, `when` a condition holds,
`require` a condition). Each assistant turn is judged with its prefix as context: every rule triggered by a decision
in the turn is kept or broken, and the score is the kept share (by weight). The language: docs/policy-language.md.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

from stateset_agents import Reward, TurnGrade

from stateset_agents.errors import InputError

from ._text import (find_phrases, has_phrase, is_error_result, message_text, parse_arguments, parse_json_maybe,
                    tool_calls, tool_result)
from .policy_language import UNKNOWN, Evaluator, flatten, load_policy, matches


class NSRReward(Reward):
    name = "nsr"
    version = "1.1.0"
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

    def grade_turn(self, conversation: Mapping[str, Any], turn_index: int) -> TurnGrade:
        messages = conversation.get("messages") or []
        turn = messages[turn_index]
        context = _Context(self.policy, messages, turn_index)
        verdicts: list[dict[str, Any]] = []
        for decision in context.decisions(turn):
            for rule in self.policy["rules"]:
                if not _triggers(rule["decision"], decision, self.policy):
                    continue
                verdict = context.judge(rule, decision)
                if verdict == "kept" and rule["counts"] == "when_broken":
                    verdict = None  # keeping a standing prohibition is no evidence of a good decision
                if verdict is not None:
                    verdicts.append({"rule": rule["id"], "decision": decision["label"], "verdict": verdict,
                                     "weight": rule["weight"], "says": rule["says"]})
        if not verdicts:
            return TurnGrade.not_applicable("no policy rule applies to this turn's decisions")
        total = sum(v["weight"] for v in verdicts)
        kept = sum(v["weight"] for v in verdicts if v["verdict"] == "kept")
        breakdown = {f"{v['rule']}@{v['decision']}": v["verdict"] for v in verdicts}
        if self.policy["scoring"] == "all_kept":  # a decision complies or it does not
            score = 0.0 if any(v["verdict"] == "broken" for v in verdicts) else 1.0
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


def _triggers(on: Mapping[str, Any], decision: Mapping[str, Any], policy: Mapping[str, Any]) -> bool:
    kind = on["kind"]
    if kind == "turn":
        return decision["kind"] == "turn"
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


class _Context:
    """Facts visible at one assistant turn: the prefix only (plus, for calls, whether they errored)."""

    def __init__(self, policy: Mapping[str, Any], messages: Sequence[Mapping[str, Any]], turn_index: int):
        self.policy = policy
        self.messages = messages
        self.turn_index = turn_index
        self.prefix = messages[:turn_index]
        self.words = policy["words"]

    # ------------------------------------------------------------------------------------------- decisions
    def decisions(self, turn: Mapping[str, Any]) -> list[dict[str, Any]]:
        calls = tool_calls(turn)
        text = message_text(turn)
        shape = {"tool_calls": len(calls), "has_text": bool(text.strip()), "text": text}
        found = [{"kind": "turn", "label": "turn", "turn": shape, "args": {}, "call": None, "text": text}]
        for call in calls:
            arguments, _ = parse_arguments(call["arguments"])
            found.append({"kind": "call", "label": call["name"], "call": call["name"], "turn": shape,
                          "args": arguments if arguments is not None else UNKNOWN, "text": text})
        if text.strip() and has_phrase(text, self.words.get("refusal", ())):
            found.append({"kind": "refusal", "label": "refusal", "turn": shape, "args": {}, "call": None,
                          "text": text})
        return found

    # ---------------------------------------------------------------------------------------------- judging
    def judge(self, rule: Mapping[str, Any], decision: Mapping[str, Any]) -> str | None:
        facts: dict[str, Any] = {}
        evaluator = Evaluator(lambda name: self._resolve(name, decision, facts, evaluator), self._functions(decision))
        if rule["when"] is not None:
            applies = evaluator.evaluate(rule["when"])
            if applies is UNKNOWN or not applies:
                return None
        outcome = evaluator.evaluate(rule["require"])
        if outcome is UNKNOWN:
            return None if rule["if_unknown"] == "skip" else rule["if_unknown"]
        return "kept" if outcome else "broken"

    def _resolve(self, name: str, decision: Mapping[str, Any], facts: dict[str, Any], evaluator: Evaluator) -> Any:
        if name in ("args", "call", "turn"):
            return decision[name]
        if name == "user_confirmed":
            return self._user_confirmed()
        if name in self.policy["constants"]:
            return self.policy["constants"][name]
        if name in self.policy["facts"]:
            if name not in facts:
                facts[name] = UNKNOWN  # a fact that refers to itself stays unknown instead of looping
                facts[name] = evaluator.evaluate(self.policy["facts"][name])
            return facts[name]
        raise InputError(f"policy expression uses {name!r}, which is neither a fact, a constant nor a built-in "
                         "name (args, call, turn, user_confirmed)", field="policy")

    def _functions(self, decision: Mapping[str, Any]) -> dict[str, Callable[..., Any]]:
        words = self.words
        return {
            "result": self._result,
            "called": lambda tool: self._result(tool) is not UNKNOWN,
            "args_of": lambda tool, **match: self._result(tool, _want="arguments", **match),
            "results_of": self._results_of,
            "records_of": self._records_of,
            "user_said": lambda *p: any(has_phrase(t, _expand(p, words)) for t in self._texts("user")),
            "user_said_last": lambda *p: has_phrase(self._last_text("user"), _expand(p, words)),
            "agent_said": lambda *p: any(has_phrase(t, _expand(p, words)) for t in self._texts("assistant")),
            "agent_said_last": lambda *p: has_phrase(self._last_text("assistant"), _expand(p, words)),
            "turn_says": lambda *p: has_phrase(decision["text"], _expand(p, words)),
            "turn_matches": lambda pattern: _regex_matches(pattern, decision["text"]),
            "seen": self._seen,
        }

    # ------------------------------------------------------------------------------------------------ facts
    def _seen(self, value: Any) -> Any:
        """Did `value` appear (word-bounded, case-insensitive) in a tool result or a user message of the prefix?
        What the agent may state as a fact is what the user or the tools provided."""
        if value is UNKNOWN or value is None:
            return UNKNOWN
        sources = [message_text(m) for m in self.prefix if m.get("role") in ("tool", "user")]
        return any(has_phrase(text, (str(value),)) for text in sources)

    def _texts(self, role: str) -> list[str]:
        return [message_text(m) for m in self.prefix if m.get("role") == role]

    def _last_text(self, role: str) -> str:
        """The latest message of `role` that says something (an agent's tool-call-only turns say nothing)."""
        for text in reversed(self._texts(role)):
            if text.strip():
                return text
        return ""

    def _user_confirmed(self) -> bool:
        """The latest user message says yes (an `affirm` word) and does not say no (`negate`) before it."""
        last = self._last_text("user")
        yes = find_phrases(last, self.words.get("affirm", ()))
        no = find_phrases(last, self.words.get("negate", ()))
        if not yes:
            return False
        return not no or last.lower().find(no[0]) > last.lower().find(yes[0])

    def _successful_calls(self, tool: str | Sequence[str], match: Mapping[str, Any]):
        """(arguments, parsed result) of each successful call to `tool` (or any tool in a list) in the prefix whose
        arguments equal `match`, latest first. A failed call (no answer, or an error result) established nothing."""
        tools = {tool} if isinstance(tool, str) else set(tool)
        for index in range(len(self.prefix) - 1, -1, -1):
            message = self.prefix[index]
            if message.get("role") != "assistant":
                continue
            for call in reversed(tool_calls(message)):
                if call["name"] not in tools:
                    continue
                arguments, _ = parse_arguments(call["arguments"])
                if arguments is None or not _arguments_match(arguments, match):
                    continue
                answer = tool_result(self.prefix, call["id"], index + 1)
                if answer is None or is_error_result(message_text(answer)):
                    continue
                yield arguments, parse_json_maybe(message_text(answer))

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


def _regex_matches(pattern: Any, text: str) -> list[str]:
    """The distinct matches of a regular expression (from the policy file) in a text, in order."""
    try:
        compiled = re.compile(str(pattern))
    except re.error as exc:
        raise InputError(f"policy regular expression {pattern!r} does not compile: {exc}", field="policy")
    return list(dict.fromkeys(m.group(0) for m in compiled.finditer(text)))


def _arguments_match(arguments: Mapping[str, Any], match: Mapping[str, Any]) -> bool:
    return matches(arguments, match)
