"""Test-only rewards for tests/improve, loaded through STATESET_AGENTS_PLUGIN_MODULES (see conftest.py), so a
subprocess-served copy finds them too."""
from __future__ import annotations

from stateset_agents import Reward, TurnGrade, hookimpl

# The first keyword found in a text turn sets its score.
KEYWORDS = (("EXPLODE", None), ("GOOD", 1.0), ("EDGE", 0.7), ("OKAY", 0.6), ("BAD", 0.1))


class ToyReward(Reward):
    """Text turns score by keyword (else 0.5); a turn with only tool calls scores 0.9; an empty turn is not
    applicable. `config.policy.min_words` makes shorter text turns not applicable, so tests see the policy arrive."""

    name, version = "improve_toy", "1.2.0"
    batch_sizes: list[int] = []  # conversations per grade() call, in-process

    def grade(self, items):
        items = list(items)
        ToyReward.batch_sizes.append(len(items))
        return super().grade(items)

    def grade_turn(self, conversation, turn_index):
        message = conversation["messages"][turn_index]
        text = message.get("content") if isinstance(message.get("content"), str) else ""
        if not text:
            if message.get("tool_calls"):
                return TurnGrade(0.9, breakdown={"tool_call": 1.0}, reason="calls a tool")
            return TurnGrade.not_applicable("empty turn")
        min_words = (self.config.get("policy") or {}).get("min_words", 0)
        if len(text.split()) < min_words:
            return TurnGrade.not_applicable(f"fewer than {min_words} words")
        score = next((s for k, s in KEYWORDS if k in text), 0.5)
        if score is None:
            raise RuntimeError("asked to explode")
        return TurnGrade(score, breakdown={"keyword": score, "polite": "please" in text.lower()},
                         reason=f"keyword score {score}\nsecond line is dropped")


class DroppingReward(Reward):
    """Breaks the contract: loses the last grade of every batch."""

    name, version = "improve_dropping", "1.0.0"

    def grade_turn(self, conversation, turn_index):
        return TurnGrade(1.0)

    def grade(self, items):
        return super().grade(items)[:-1]


@hookimpl
def register_rewards(register):
    register(ToyReward)
    register(DroppingReward)
