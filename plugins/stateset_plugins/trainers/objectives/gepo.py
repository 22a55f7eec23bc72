r"""GEPO: Group Expectation Policy Optimization (Zhang et al., 2025, arXiv:2508.17850).

For heterogeneous or delayed samplers: the completions of a group may come from a behaviour policy q several
versions behind (or from another sampler altogether) and carry q's recorded log-probs. Token ratios pi/q then
have a variance that grows with the KL between them; GEPO replaces the sample's own q(o_i) in the denominator by
the group's expectation of q under q, which is far less variable:

    E_q[q] ~= sum_j q(o_j | x)^2 / sum_j q(o_j | x)                 (over the group o_1..o_G)
    w_i    = p_theta(o_i | x) / E_q[q]
    L      = -1/G sum_i min( w_i A_i, clip(w_i, 1 - eps, 1 + eps) A_i )    [+ beta KL, optional]

with group-relative A_i as in GRPO. p and q are length-normalised sequence probabilities (exp of the per-token mean
log-prob, as in GSPO) and w is computed in log space: log w_i = mean_t log p_theta(o_i,t) - (logsumexp_j 2 log q_j -
logsumexp_j log q_j), so neither side underflows. Because min_j q_j <= E_q[q] <= max_j q_j, w_i <= 1 / min_j q_j
however stale q is. Implemented in the token form of `common.policy_loss` (value w_i, gradient
w_i * grad log p_theta). Unlike the token ratio, w is not 1 on-policy (it is q_i / E_q[q]).

Defaults: ``epsilon`` 0.2 (our choice: w is a sequence-level weight near 1, not GSPO's per-token geometric mean
ratio), ``beta`` 0.0.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import RLConfig
from .base import Objective
from .common import policy_loss


@dataclass
class GEPOConfig(RLConfig):
    algorithm = "gepo"
    beta: float = 0.0
    epsilon: float = 0.2


class GEPO(Objective):
    name, stem, Config = "gepo", "GEPO", GEPOConfig
    ddp_loss = "rows"  # `Objective.ddp_loss`

    def loss(self, new_logp, batch, config: GEPOConfig):
        return policy_loss(new_logp, batch, config.beta, config.epsilon, config.epsilon, token_level=False,
                           ratio_level="group")
