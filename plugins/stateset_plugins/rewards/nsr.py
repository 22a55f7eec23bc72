"""`nsr`: the agent's decisions judged against a declarative (symbolic) policy, evaluated locally.

The code knows no domain. The policy file names the tools that write or hand off, the facts (expressions over tool
results, tool arguments and what the user said) and the rules (on a `decision`, `when` a condition holds,
`require` a condition). Each assistant turn is judged with its prefix as context: every rule triggered by a decision
in the turn is kept or broken, and the score is the kept share (by weight). The language: docs/policy-language.md.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from stateset_agents import Reward, TurnGrade

from stateset_agents.errors import InputError

from ._text import (find_phrases, has_phrase, is_error_result, message_text, parse_arguments, parse_json_maybe,
                    tool_calls, tool_result)
from .policy_language import UNKNOWN, Evaluator, load_policy


class NSRReward(Reward):
    name = "nsr"
    version = "1.0.0"
    config_schema = {
        "type": "object",
        "properties": {"policy": {"type": "object", "description": "The parsed policy file (YAML or JSON)."}},
        "required": ["policy"],
    }

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
            "user_said": lambda *p: any(has_phrase(t, _expand(p, words)) for t in self._texts("user")),
            "user_said_last": lambda *p: has_phrase(self._last_text("user"), _expand(p, words)),
            "agent_said": lambda *p: any(has_phrase(t, _expand(p, words)) for t in self._texts("assistant")),
            "turn_says": lambda *p: has_phrase(decision["text"], _expand(p, words)),
        }

    # ------------------------------------------------------------------------------------------------ facts
    def _texts(self, role: str) -> list[str]:
        return [message_text(m) for m in self.prefix if m.get("role") == role]

    def _last_text(self, role: str) -> str:
        texts = self._texts(role)
        return texts[-1] if texts else ""

    def _user_confirmed(self) -> bool:
        """The latest user message says yes (an `affirm` word) and does not say no (`negate`) before it."""
        last = self._last_text("user")
        yes = find_phrases(last, self.words.get("affirm", ()))
        no = find_phrases(last, self.words.get("negate", ()))
        if not yes:
            return False
        return not no or last.lower().find(no[0]) > last.lower().find(yes[0])

    def _result(self, tool: str | Sequence[str], _want: str = "result", **match: Any) -> Any:
        """The latest successful result of `tool` (or of any tool in a list) in the prefix whose call arguments
        equal `match`, as data. A list lets a write's result (the updated record) count as the latest state.
        `_want="arguments"`: that call's own arguments instead (what a write set, when its result does not echo it)."""
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
                    continue  # a failed call established nothing
                return arguments if _want == "arguments" else parse_json_maybe(message_text(answer))
        return UNKNOWN


def _arguments_match(arguments: Mapping[str, Any], match: Mapping[str, Any]) -> bool:
    for key, wanted in match.items():
        if wanted is UNKNOWN:
            return False
        have = arguments.get(key)
        if isinstance(have, str) and isinstance(wanted, str):
            if have.strip().casefold() != wanted.strip().casefold():
                return False
        elif have != wanted:
            return False
    return True
