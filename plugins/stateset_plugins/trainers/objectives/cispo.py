r"""CISPO: Clipped IS-weight Policy Optimization (MiniMax, 2025, "MiniMax-M1", arXiv:2506.13585).

PPO/GRPO clip the update: once a token's ratio leaves the trust region its gradient is zero, and rare tokens
(often the "fork" tokens of a reasoning trace) stop learning after the first update. CISPO clips the importance
weight instead and detaches it, so every token keeps a REINFORCE gradient, scaled by a bounded weight:

    r_i,t    = pi_theta(o_i,t | q, o_i,<t) / pi_old(o_i,t | q, o_i,<t)
    r^_i,t   = clip(r_i,t, 1 - eps_low, 1 + eps_high)
    L(theta) = -1 / sum_i |o_i| * sum_i sum_t sg(r^_i,t) A_i log pi_theta(o_i,t | q, o_i,<t)   [+ beta k3_t]

with group-relative A_i as in GRPO and token-level aggregation (the paper's). Defaults: ``epsilon`` (eps_low) 1.0,
i.e. no lower bound (the paper sets eps_low large and tunes only the upper one), ``epsilon_high`` 0.28 (our
choice, DAPO's clip-higher value; the paper does not state its own), ``beta`` 0.0 (no KL term).
``clip_fraction`` reports how often the weight was clipped.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import RLConfig
from .base import Objective
from .common import kl_term, masked_token_mean, safe


@dataclass
class CISPOConfig(RLConfig):
    algorithm = "cispo"
    EPSILON_HIGH_AT_LEAST_LOW = False  # eps_low is "large" (no lower bound), eps_high small
    beta: float = 0.0
    epsilon: float = 1.0
    epsilon_high: float = 0.28


class CISPO(Objective):
    name, stem, Config = "cispo", "CISPO", CISPOConfig

    def loss(self, new_logp, batch, config: CISPOConfig):
        mask = batch.completion_mask
        new = safe(new_logp, mask)
        ratio = torch.exp(new - safe(batch.behaviour_logp, mask)).detach()
        weight = torch.clamp(ratio, 1 - config.epsilon, 1 + config.epsilon_high)
        per_token = -weight * batch.advantages[:, None] * new
        stats = {"clip_fraction": float(masked_token_mean((weight != ratio).float(), mask))}
        per_token = per_token + kl_term(new, batch, config.beta, stats)
        return masked_token_mean(per_token, mask), stats
