r"""GSPO: Group Sequence Policy Optimization (Zheng et al., 2025, arXiv:2507.18071).

Advantages as in GRPO, but the importance ratio is taken per sequence and length-normalised:

    s_i(theta) = ( pi_theta(o_i | q) / pi_old(o_i | q) ) ^ (1/|o_i|)
               = exp( 1/|o_i| sum_t log( pi_theta(o_i,t | ...) / pi_old(o_i,t | ...) ) )
    L(theta)   = -1/G sum_i min( s_i A_i, clip(s_i, 1 - eps, 1 + eps_high) A_i )   [+ beta KL, optional]

Implemented in the token form s_i,t = sg[s_i] * pi_theta(o_i,t) / sg[pi_theta(o_i,t)], whose value is s_i and whose
gradient equals the sequence ratio's, averaged over each sequence's tokens.

Defaults: ``epsilon`` 3e-4 and ``epsilon_high`` 4e-4 (the paper's clipping ranges, far smaller than GRPO's since the
ratio is a per-token geometric mean), ``beta`` 0.0 (the paper uses no KL term).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import RLConfig
from .base import Objective
from .common import policy_loss


@dataclass
class GSPOConfig(RLConfig):
    algorithm = "gspo"
    beta: float = 0.0
    epsilon: float = 3e-4
    epsilon_high: float = 4e-4


class GSPO(Objective):
    name, stem, Config = "gspo", "GSPO", GSPOConfig
    ddp_loss = "rows"  # `Objective.ddp_loss`

    def loss(self, new_logp, batch, config: GSPOConfig):
        return policy_loss(new_logp, batch, config.beta, config.epsilon, config.epsilon_high, token_level=False,
                           ratio_level="sequence")
