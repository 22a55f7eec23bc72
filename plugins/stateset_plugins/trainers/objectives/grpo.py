r"""GRPO: Group Relative Policy Optimization (Shao et al., 2024, "DeepSeekMath", arXiv:2402.03300).

For each prompt q, sample a group o_1..o_G from the behaviour policy and score them r_1..r_G. Then

    A_i      = (r_i - mean(r)) / std(r)
    rho_i,t  = pi_theta(o_i,t | q, o_i,<t) / pi_old(o_i,t | q, o_i,<t)
    L(theta) = -1/G sum_i 1/|o_i| sum_t [ min(rho_i,t A_i, clip(rho_i,t, 1-eps, 1+eps) A_i)
                                          - beta KL_t(pi_theta || pi_ref) ]
    KL_t     = pi_ref/pi_theta - log(pi_ref/pi_theta) - 1          (the k3 estimator)

pi_old is the policy that sampled (its log-probs are recorded at generation time), pi_ref the base model with the
adapter disabled. Aggregation is per sequence, then over the group (the paper's 1/|o_i|).

Defaults: ``beta`` 0.04 and ``epsilon`` 0.2, both the paper's. One optimizer update per rollout batch, so the ratio
starts at 1 and clipping only bites once several updates share a batch; ``clip_fraction`` is reported regardless.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import RLConfig
from .base import Objective
from .common import policy_loss


@dataclass
class GRPOConfig(RLConfig):
    algorithm = "grpo"
    beta: float = 0.04
    epsilon: float = 0.2


class GRPO(Objective):
    name, stem, Config = "grpo", "GRPO", GRPOConfig
    ddp_loss = "rows"  # `Objective.ddp_loss`

    def loss(self, new_logp, batch, config: GRPOConfig):
        return policy_loss(new_logp, batch, config.beta, config.epsilon, config.epsilon, token_level=False)
