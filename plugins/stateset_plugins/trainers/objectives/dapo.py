r"""DAPO: Decoupled Clip and Dynamic sAmpling Policy Optimization (Yu et al., 2025, arXiv:2503.14476).

    L(theta) = -1 / sum_i |o_i| * sum_i sum_t min( rho_i,t A_i, clip(rho_i,t, 1 - eps_low, 1 + eps_high) A_i )
    subject to 0 < |{o_i : o_i correct}| < G      (dynamic sampling)

* clip-higher: ``epsilon`` (eps_low, 0.2) and ``epsilon_high`` (0.28), the paper's values;
* dynamic sampling (``dynamic_sampling``, True): groups whose rewards are all equal carry no gradient and are
  dropped; more prompts are sampled until the batch holds ``batch_size`` groups or ``max_sampling_rounds`` (3)
  rollouts were drawn for this update (the cap). Short of groups at the cap, the batch is topped up with dropped
  groups (zero advantage, so no policy gradient) and the metric ``zero_variance_fraction`` shows it;
* token-level aggregation: every token of the batch weighs the same (the 1 / sum |o_i| above);
* overlong reward shaping: with L_max = ``max_new_tokens`` and L_cache = ``overlong_buffer`` (None: a quarter of
  L_max; the paper used 4096 of 20480),
      R_len(y) = 0                               if |y| <= L_max - L_cache
               = ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
               = -1                              otherwise (truncated)
  times ``overlong_penalty`` (1.0), added to the reward before advantages;
* ``beta`` 0.0: the paper removes the KL term.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from stateset_agents.core.errors import InputError

from ..config import RLConfig
from .base import Objective
from .common import policy_loss, zero_variance_groups


@dataclass
class DAPOConfig(RLConfig):
    algorithm = "dapo"
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    dynamic_sampling: bool = True
    max_sampling_rounds: int = 3
    overlong_buffer: int | None = None
    overlong_penalty: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        if self.max_sampling_rounds < 1:
            raise InputError("max_sampling_rounds must be at least 1", field="max_sampling_rounds")
        if self.overlong_buffer is not None and not 0 <= self.overlong_buffer <= self.max_new_tokens:
            raise InputError("overlong_buffer must lie in [0, max_new_tokens]", field="overlong_buffer")


def overlong_penalty(lengths: torch.Tensor, truncated: torch.Tensor, config: DAPOConfig) -> torch.Tensor:
    l_max = config.max_new_tokens
    l_cache = l_max // 4 if config.overlong_buffer is None else config.overlong_buffer
    if l_cache == 0:
        return torch.where(truncated, -1.0, 0.0) * config.overlong_penalty
    soft = ((l_max - l_cache) - lengths.float()) / l_cache
    pen = torch.where(lengths <= l_max - l_cache, torch.zeros_like(soft), soft)
    pen = torch.where(truncated, torch.full_like(soft, -1.0), pen)
    return pen * config.overlong_penalty


class DAPO(Objective):
    name, stem, Config = "dapo", "DAPO", DAPOConfig

    def sampling_rounds(self, config: DAPOConfig) -> int:
        return config.max_sampling_rounds

    def shape_rewards(self, rewards: torch.Tensor, lengths: torch.Tensor, truncated: torch.Tensor,
                      config: DAPOConfig):
        return rewards + overlong_penalty(lengths, truncated, config)

    def keep_group(self, rewards: torch.Tensor, config: DAPOConfig) -> bool:
        """Dynamic sampling's filter for one group's (shaped) rewards."""
        return not config.dynamic_sampling or not bool(zero_variance_groups(rewards, len(rewards))[0])

    def loss(self, new_logp, batch, config: DAPOConfig):
        return policy_loss(new_logp, batch, config.beta, config.epsilon, config.epsilon_high, token_level=True)
