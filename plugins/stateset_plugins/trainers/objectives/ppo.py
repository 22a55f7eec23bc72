r"""PPO with a critic and GAE (Schulman et al., 2017, arXiv:1707.06347; GAE: Schulman et al., 2016,
arXiv:1506.02438; the RLHF form: Ouyang et al., 2022, arXiv:2203.02155): the standard baseline.

A completion is one episode; its reward R arrives on the last sampled token. With V the value head,

    r_t       = -beta * (log pi_old(o_t) - log pi_ref(o_t))  [kl_mode "reward"]  + R * [t = last]
    delta_t   = r_t + gamma V(s_{t+1}) - V(s_t),       A_t = sum_l (gamma lambda)^l delta_{t+l}
    G_t       = A_t + V_old(s_t)                                     (the value target)
    L_policy  = -1/sum|o_i| sum_i,t min(rho_t A_t, clip(rho_t, 1 - eps, 1 + eps) A_t)   [+ beta k3_t, kl_mode "loss"]
    L_value   = 1/sum|o_i| sum_i,t 1/2 max((V_t - G_t)^2, (V_old,t + clip(V_t - V_old,t, -eps_v, eps_v) - G_t)^2)
    L         = L_policy + L_value

rho_t = pi_theta / pi_old per token. Advantages are whitened over the batch's tokens (``whiten_advantages``).
The value head reads the policy's detached last hidden states and has its own optimizer (see `ValueConfig`).

Defaults: ``epsilon`` 0.2, ``value_clip`` 0.2, ``gamma`` 1.0, ``lam`` 0.95, ``beta`` 0.05 with ``kl_mode``
"reward" (the InstructGPT form; "loss" adds beta * k3 to the loss instead, as GRPO does), ``whiten_advantages``
True. ``num_generations`` still sets how many completions each prompt gets (independent samples here, no group
baseline), so budgets match the group objectives.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from stateset_agents.core.errors import InputError

from ..config import ValueConfig
from .base import Objective
from .common import (gae, group_advantages, masked_sequence_mean, masked_token_mean, policy_loss, safe,
                     terminal_rewards)


@dataclass
class PPOConfig(ValueConfig):
    algorithm = "ppo"
    beta: float = 0.05
    epsilon: float = 0.2
    value_clip: float = 0.2
    kl_mode: str = "reward"
    whiten_advantages: bool = True

    def __post_init__(self):
        super().__post_init__()
        if self.kl_mode not in ("reward", "loss"):
            raise InputError("kl_mode must be 'reward' or 'loss'", field="kl_mode")
        if not self.value_clip > 0:
            raise InputError("value_clip must be positive", field="value_clip")


def token_rewards(batch, config: PPOConfig) -> torch.Tensor:
    """R on the last sampled token, minus the per-token KL penalty (k1 on the behaviour log-probs) when the KL
    goes into the reward."""
    mask = batch.completion_mask
    r = terminal_rewards(batch.rewards, mask)
    if config.kl_mode == "reward" and config.beta > 0:
        r = r - config.beta * (safe(batch.behaviour_logp, mask) - safe(batch.ref_logp, mask)) * mask
    return r


def whiten(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean = masked_token_mean(values, mask)
    var = masked_token_mean((values - mean) ** 2, mask)
    return (values - mean) / (var.sqrt() + 1e-8) * mask


class PPO(Objective):
    name, stem, Config = "ppo", "PPO", PPOConfig
    value_head = True

    def advantages(self, rewards, group_size: int, config: PPOConfig):
        """Sequence advantages before the critic: group-centred rewards. `prepare` replaces them with GAE's
        per-token advantages; they stand only where no value head runs (a bare `loss` call without values)."""
        return group_advantages(rewards, group_size, scale=False)

    def prepare(self, batch, backend, config: PPOConfig) -> dict[str, float]:
        mask = batch.completion_mask
        batch.old_values = backend.values(batch) * mask
        adv, batch.returns = gae(token_rewards(batch, config), batch.old_values, mask, config.gamma, config.lam)
        batch.token_advantages = whiten(adv, mask) if config.whiten_advantages else adv
        batch.advantages = masked_sequence_mean(batch.token_advantages, mask)
        return {"value_mean": float(masked_token_mean(batch.old_values, mask))}

    def value_loss(self, values, batch, config: PPOConfig):
        """Clipped value loss: the new value may not move further than ``value_clip`` from the sampling-time
        value and gain from it (the max keeps the pessimistic branch)."""
        mask = batch.completion_mask
        clipped = batch.old_values + torch.clamp(values - batch.old_values, -config.value_clip, config.value_clip)
        unclipped_err, clipped_err = (values - batch.returns) ** 2, (clipped - batch.returns) ** 2
        loss = 0.5 * masked_token_mean(torch.maximum(unclipped_err, clipped_err), mask)
        frac = masked_token_mean(((values - batch.old_values).abs() > config.value_clip).float(), mask)
        return loss, {"value_loss": float(loss.detach()), "value_clip_fraction": float(frac)}

    def loss(self, new_logp, batch, config: PPOConfig, values=None):
        beta = config.beta if config.kl_mode == "loss" else 0.0
        pl, stats = policy_loss(new_logp, batch, beta, config.epsilon, config.epsilon, token_level=True)
        vl, vstats = self.value_loss(values, batch, config) if values is not None else (0.0, {})
        return pl + vl, {"policy_loss": float(pl.detach()), **stats, **vstats}
