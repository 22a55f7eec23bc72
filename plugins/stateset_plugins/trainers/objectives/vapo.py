r"""VAPO: Value-model-based Augmented PPO (Yue et al., 2025, arXiv:2504.05118).

PPO with a value model, made to work on long reasoning sequences:

* value pre-training: before any policy update, ``value_pretrain_steps`` rollouts of the initial policy train only
  the value head toward Monte Carlo returns (lambda = 1), so the critic is not a random baseline at step 1
  (paper: 50 steps; ours 8, for CPU-sized runs). The policy's prompt order is untouched (see the engine);
* decoupled GAE: the critic's targets use lambda_critic = 1 (unbiased), the policy's advantages a
  length-adaptive lambda_policy = 1 - 1 / (alpha |o_i|), alpha = ``alpha`` (0.05, the paper's), clamped to
  [0, 1] because |o_i| < 1/alpha (20 tokens) would make it negative;
* clip-higher (from DAPO): ``epsilon`` 0.2, ``epsilon_high`` 0.28;
* token-level loss: every token of the batch weighs the same;
* positive-example LM loss: mu * NLL on the completions whose reward reaches ``nll_threshold`` (1.0: the correct
  ones under a 0/1 verifier), mu = ``nll_coef`` (0.1, the paper's).

    delta_t   = R [t = last] + V(s_{t+1}) - V(s_t)                                           (gamma = 1)
    A_t       = sum_l lambda_policy^l delta_{t+l},    G_t = sum_l delta_{t+l} + V_old(s_t)     (lambda_critic = 1)
    L_PPO     = -1/sum|o_i| sum_i,t min(rho_t A_t, clip(rho_t, 1 - eps_low, 1 + eps_high) A_t)
    L_NLL     = -1/sum_{o_i in T}|o_i| sum_{o_i in T} sum_t log pi_theta(o_i,t)   (T: positive samples)
    L_value   = 1/sum|o_i| sum_i,t 1/2 (V_t - G_t)^2
    L         = L_PPO + mu L_NLL + L_value

``beta`` 0.0 (no KL term, as in the paper). The value head reads the policy's detached last hidden states (its own
optimizer; see `ValueConfig`).
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
class VAPOConfig(ValueConfig):
    algorithm = "vapo"
    beta: float = 0.0
    epsilon: float = 0.2
    epsilon_high: float = 0.28
    lam: float = 1.0  # the critic's lambda (decoupled GAE); the policy's is length-adaptive, from `alpha`
    alpha: float = 0.05
    value_pretrain_steps: int = 8
    nll_coef: float = 0.1
    nll_threshold: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        if not self.alpha > 0:
            raise InputError("alpha must be positive", field="alpha")
        if self.value_pretrain_steps < 0 or self.nll_coef < 0:
            field = "value_pretrain_steps" if self.value_pretrain_steps < 0 else "nll_coef"
            raise InputError(f"{field} must be >= 0", field=field)


def policy_lambda(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """lambda_policy = 1 - 1 / (alpha * length), per sequence, clamped to [0, 1]."""
    return (1 - 1 / (alpha * lengths.float().clamp(min=1))).clamp(0.0, 1.0)


def positive_nll(new_logp, batch, config: VAPOConfig) -> torch.Tensor:
    positive = (batch.rewards >= config.nll_threshold).float()[:, None] * batch.completion_mask
    return masked_token_mean(-safe(new_logp, positive), positive)  # 0 when no sample is positive


class VAPO(Objective):
    name, stem, Config = "vapo", "VAPO", VAPOConfig
    value_head = True

    def advantages(self, rewards, group_size: int, config: VAPOConfig):
        """Sequence advantages before the critic: group-centred rewards. `prepare` replaces them with GAE's
        per-token advantages; they stand only where no value head runs (a bare `loss` call without values)."""
        return group_advantages(rewards, group_size, scale=False)

    def value_pretrain_steps(self, config: VAPOConfig) -> int:
        return config.value_pretrain_steps

    def prepare(self, batch, backend, config: VAPOConfig) -> dict[str, float]:
        mask = batch.completion_mask
        batch.old_values = backend.values(batch) * mask
        rewards = terminal_rewards(batch.rewards, mask)
        _, batch.returns = gae(rewards, batch.old_values, mask, config.gamma, config.lam)
        lam = policy_lambda(mask.sum(-1), config.alpha)
        batch.token_advantages, _ = gae(rewards, batch.old_values, mask, config.gamma, lam)
        batch.advantages = masked_sequence_mean(batch.token_advantages, mask)
        return {"value_mean": float(masked_token_mean(batch.old_values, mask)),
                "policy_lambda": float(lam.mean())}

    def value_loss(self, values, batch, config: VAPOConfig):
        loss = 0.5 * masked_token_mean((values - batch.returns) ** 2, batch.completion_mask)
        return loss, {"value_loss": float(loss.detach())}

    def loss(self, new_logp, batch, config: VAPOConfig, values=None):
        pl, stats = policy_loss(new_logp, batch, config.beta, config.epsilon, config.epsilon_high, token_level=True)
        nll = positive_nll(new_logp, batch, config)
        vl, vstats = self.value_loss(values, batch, config) if values is not None else (0.0, {})
        return pl + config.nll_coef * nll + vl, {"policy_loss": float(pl.detach()), "nll": float(nll.detach()),
                                                  **stats, **vstats}
