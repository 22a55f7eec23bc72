"""Shared fixtures for the reward tests: the shipped airline policy and conversation-level scoring on real data."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stateset_agents.components import assistant_turns

POLICY_PATH = (Path(__file__).resolve().parents[2] / "plugins" / "stateset_plugins" / "rewards" / "policies"
               / "airline.yaml")

#: What a conversation with no applicable turn scores (documented in docs/rewards.md): neutral.
NO_APPLICABLE_TURN_SCORE = 0.5


def conversation_score(reward, conversation) -> float:
    """Mean of the applicable turns' scores; NO_APPLICABLE_TURN_SCORE when no turn applies."""
    scores = [g.score for g in (reward.grade_turn(conversation, t) for t in assistant_turns(conversation))
              if g.applicable]
    return sum(scores) / len(scores) if scores else NO_APPLICABLE_TURN_SCORE


@pytest.fixture(scope="session")
def airline_policy() -> dict:
    return yaml.safe_load(POLICY_PATH.read_text())


@pytest.fixture(scope="session")
def score_auc():
    """reward, records -> (ROC AUC of conversation score vs the success label, {id: score})."""
    from helpers.realdata import tau_labels
    from stateset_agents.stats import roc_auc

    labels = tau_labels()

    def compute(reward, records):
        scores = {r["id"]: conversation_score(reward, r) for r in records}
        ids = sorted(scores)
        return roc_auc([scores[i] for i in ids], [labels[i] for i in ids]), scores

    return compute
