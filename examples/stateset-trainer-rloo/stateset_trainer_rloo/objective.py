r"""RLOO: REINFORCE with a leave-one-out baseline (Kool et al., 2019, "Buy 4 REINFORCE samples, get a baseline
for free!"; Ahmadian et al., 2024, arXiv:2402.14740).

For each prompt q the engine samples G completions o_1..o_G and the reward scores them r_1..r_G. Each completion's
baseline is the mean reward of the other G - 1, so it never includes the sample it corrects (unbiased, no critic):

    A_i      = r_i - 1/(G-1) sum_{j != i} r_j
    L(theta) = -1/N sum_i A_i log pi_theta(o_i | q)  +  beta * KL(pi_theta || pi_ref)

The whole completion is one action: log pi(o_i | q) is the sum of its tokens' log-probs (the paper's choice).
One optimizer update per rollout batch keeps it on-policy, so no importance ratio or clipping is needed.
"""
from __future__ import annotations

from dataclasses import dataclass

from stateset_plugins.trainers.objectives import Objective, PolicyConfig, kl_term, masked_sequence_mean, safe


@dataclass
class RLOOConfig(PolicyConfig):  # no scale_rewards: the baseline is never divided by a std
    algorithm = "rloo"
    beta: float = 0.0  # the paper trains without a KL term; set it to pull towards the base model


class RLOO(Objective):
    name, version, stem, Config = "rloo", "0.1.0", "RLOO", RLOOConfig

    def advantages(self, rewards, group_size, config):
        grouped = rewards.view(-1, group_size)
        baseline = (grouped.sum(dim=1, keepdim=True) - grouped) / (group_size - 1)
        return (grouped - baseline).reshape(-1)

    def loss(self, new_logp, batch, config):
        mask = batch.completion_mask
        new = safe(new_logp, mask)
        stats: dict[str, float] = {}
        loss = -(batch.advantages * (new * mask).sum(-1)).mean()
        kl = kl_term(new, batch, config.beta, stats)  # 0.0 without a KL term
        if config.beta > 0:
            loss = loss + masked_sequence_mean(kl, mask).mean()
        return loss, stats
