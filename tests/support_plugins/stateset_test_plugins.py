"""Test-only components (never shipped in the package). Loaded through STATESET_AGENTS_PLUGIN_MODULES, which
tests/conftest.py sets, so subprocess-served copies find them too."""
from __future__ import annotations

import os
import time

from stateset_agents import Evaluator, Ingestor, Reject, Reward, Trainer, TurnGrade, hookimpl
from stateset_agents.core.jsonio import iter_lines
from stateset_plugins.trainers.objectives import register_objective  # light: no torch

import orjson


def _text(message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class LengthReward(Reward):
    """Scores a turn by its length relative to `target` characters (config)."""

    name, version = "test_length", "1.0.0"
    config_schema = {"type": "object", "properties": {"target": {"type": "integer", "minimum": 1}},
                     "additionalProperties": False}

    def grade_turn(self, conversation, turn_index):
        text = _text(conversation["messages"][turn_index])
        if not text:
            return TurnGrade.not_applicable("no text in this turn")
        target = self.config.get("target", 40)
        score = min(len(text), target) / target
        return TurnGrade(score=score, breakdown={"chars": len(text), "target": target},
                         reason=f"{len(text)} characters against a target of {target}")


class ScreeningReward(LengthReward):
    """LengthReward, except that a conversation whose id starts with "skip-" has nothing applicable: `screen` sees
    that in a line that starts with its id, and leaves any other line to be parsed."""

    name = "test_screening"
    SKIPPED = "the id says skip"

    def grade_conversation(self, conversation, turns):
        if str(conversation.get("id", "")).startswith("skip-"):
            return [TurnGrade.not_applicable(self.SKIPPED) for _ in turns]
        return super().grade_conversation(conversation, turns)

    def screen(self, raw_json):
        return self.SKIPPED if raw_json.startswith(b'{"id":"skip-') else None


class FaultyReward(Reward):
    """Misbehaves on request: the turn's text says how (raise, die, hang)."""

    name, version = "test_faulty", "1.0.0"

    def grade_turn(self, conversation, turn_index):
        text = _text(conversation["messages"][turn_index])
        if "RAISE" in text:
            raise ValueError("asked to raise")
        if "DIE" in text:
            os._exit(17)
        if "HANG" in text:
            time.sleep(3600)
        if "BADSCORE" in text:
            return TurnGrade(score=1.5)
        return TurnGrade(score=1.0, reason="fine")


class LinesIngestor(Ingestor):
    """One conversation per JSON line `{"user": ..., "assistant": ...}`; anything else is rejected."""

    name, version = "test_lines", "1.0.0"

    def ingest(self, source):
        for number, raw in iter_lines(source.local_path):
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                yield Reject(source.path, number, "invalid_json", str(exc))
                continue
            if not isinstance(obj, dict) or "user" not in obj:
                yield Reject(source.path, number, "wrong_type", "expected an object with 'user'", field="user")
                continue
            yield {"id": f"line-{number}", "source": {"path": source.path, "sha256": source.sha256, "line": number},
                   "messages": [{"role": "user", "content": obj["user"]},
                                {"role": "assistant", "content": obj.get("assistant")}],
                   "tools": [], "metadata": {"n": number}}


class CountdownTrainer(Trainer):
    """Emits `steps` metrics events `delay` seconds apart; stops early (failed: cancelled) when cancelled."""

    name, version = "test_countdown", "1.0.0"

    def run(self, request):
        if "steps" not in request:
            yield {"type": "failed", "reason": "request has no 'steps'"}
            return
        steps, delay = int(request.get("steps", 3)), float(request.get("delay", 0.0))
        for step in range(1, steps + 1):
            if self.cancelled:
                yield {"type": "failed", "reason": "cancelled", "step": step - 1}
                return
            time.sleep(delay)
            if request.get("die_at") == step:
                os._exit(9)
            yield {"type": "metrics", "step": step, "loss": 1.0 / step}
        yield {"type": "completed", "steps": steps}


class EchoEvaluator(Evaluator):
    name, version = "test_echo", "1.0.0"

    def run(self, request):
        if "cases" not in request:
            yield {"type": "failed", "reason": "request has no 'cases'"}
            return
        yield {"type": "progress", "done": 0, "total": len(request.get("cases", []))}
        yield {"type": "completed", "cases": request.get("cases", []), "config": self.config}


@hookimpl
def register_rewards(register):
    register(LengthReward)
    register(ScreeningReward)
    register(FaultyReward)
    register("no_such_module_xyz.reward:Nope", name="test_unavailable", version="0.1.0",
             requires=["no_such_module_xyz"], install="pip install no-such-module-xyz")


@hookimpl
def register_ingestors(register):
    register(LinesIngestor)


@hookimpl
def register_trainers(register):
    register(CountdownTrainer)
    register_objective(register, "tests.support_plugins.stateset_test_objective:TestReinforce",
                       name="test_reinforce", version="1.0.0")


@hookimpl
def register_evaluators(register):
    register(EchoEvaluator)
