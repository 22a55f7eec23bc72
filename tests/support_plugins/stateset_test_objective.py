"""A test-only objective, registered as `trainer:test_reinforce` by `stateset_test_plugins` exactly as a third
party's would be (`register_objective` with a lazy path): REINFORCE with the group-mean baseline, a token-level
loss, and hooks that leave a trace in the metrics, so a test sees the engine call them."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from stateset_plugins.trainers.objectives import Objective, RLConfig, masked_token_mean, safe


@dataclass
class TestReinforceConfig(RLConfig):
    __test__ = False  # not a pytest test class
    algorithm = "test_reinforce"
    beta: float = 0.0
    bonus: float = 0.0  # added to every reward by `shape_rewards`


class TestReinforce(Objective):
    __test__ = False
    name, version, stem, Config = "test_reinforce", "1.0.0", "TestReinforce", TestReinforceConfig

    def advantages(self, rewards, group_size, config):
        grouped = rewards.view(-1, group_size)
        return (grouped - grouped.mean(dim=1, keepdim=True)).reshape(-1)

    def shape_rewards(self, rewards, lengths, truncated, config):
        return rewards + config.bonus

    def prepare(self, batch, backend, config):
        return {"test_prepared_rows": float(batch.rewards.numel())}

    def loss(self, new_logp, batch, config):
        mask = batch.completion_mask
        per_token = -batch.advantages[:, None] * safe(new_logp, mask)
        loss = masked_token_mean(per_token, mask)
        return loss, {"test_loss": float(loss.detach()), "test_finite": float(torch.isfinite(loss))}
