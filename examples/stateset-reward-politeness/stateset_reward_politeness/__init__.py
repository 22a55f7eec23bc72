import re

from stateset_agents import Reward, TurnGrade, hookimpl

POLITE = re.compile(r"\b(please|thank you|thanks|sorry|happy to help)\b", re.IGNORECASE)


class Politeness(Reward):
    name, version = "politeness", "0.1.0"

    def grade_turn(self, conversation, turn_index):
        text = conversation["messages"][turn_index].get("content")
        if not isinstance(text, str) or not text.strip():
            return TurnGrade.not_applicable("no text to judge")
        hits = sorted({m.lower() for m in POLITE.findall(text)})
        return TurnGrade(score=min(1.0, len(hits) / 2), breakdown={"polite_phrases": len(hits)},
                         reason=f"polite phrases: {', '.join(hits) or 'none'}")


@hookimpl
def register_rewards(register):
    register(Politeness)
