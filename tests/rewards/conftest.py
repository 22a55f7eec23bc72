"""Shared fixtures for the reward tests: the shipped airline policy and conversation-level scoring on real data."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

POLICY_PATH = (Path(__file__).resolve().parents[2] / "plugins" / "stateset_plugins" / "rewards" / "policies"
               / "airline.yaml")

from tests.rewards.reward_builders import conversation_score


@pytest.fixture(scope="session")
def airline_policy() -> dict:
    return yaml.safe_load(POLICY_PATH.read_text())


@pytest.fixture(scope="session")
def score_auc():
    """reward, records -> (ROC AUC of conversation score vs the success label, {id: score})."""
    from stateset_agents.plugin_api.stats import roc_auc
    from tests.helpers.realdata import tau_labels

    labels = tau_labels()

    def compute(reward, records):
        scores = {r["id"]: conversation_score(reward, r) for r in records}
        ids = sorted(scores)
        return roc_auc([scores[i] for i in ids], [labels[i] for i in ids]), scores

    return compute
