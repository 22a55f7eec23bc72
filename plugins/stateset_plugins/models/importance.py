"""The truncated importance correction (TIS) for rollouts sampled by something other than the trainer's own
float32 forward pass: a vLLM engine (`vllm_rollout`) or a lower-precision copy of the weights (`low_precision`).

The two compute the same policy with other kernels or other rounding, so their log-probs of a sampled token differ
a little from the trainer's. The loss uses the trainer's log-probs of the sampling policy as the ratio's
denominator and weights each sampled token by min(exp(logp_trainer - logp_sampler), C) (Yao et al. 2025, "Your
efficient RL framework secretly brings you off-policy RL training"); the mismatch is reported per update.
"""
from __future__ import annotations

import dataclasses
import math

import torch


def tis_weights(trainer_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor,
                cap: float | None, sampler: str = "vllm") -> tuple[torch.Tensor, dict[str, float]]:
    """Per sampled token w = min(exp(logp_trainer - logp_sampler), cap) (1 without a cap, 0 off the mask), and
    the mismatch stats: mean and max |logp_trainer - logp_sampler| (named after the `sampler`), the fraction of
    tokens whose weight was capped."""
    on = mask > 0
    delta = torch.where(on, trainer_logp.detach() - behaviour_logp, torch.zeros_like(trainer_logp))
    ratio = torch.exp(delta)
    if cap is None:
        weight = torch.ones_like(ratio)
        capped = torch.zeros_like(on)
    else:
        weight = torch.clamp(ratio, max=float(cap))
        capped = ratio > cap
    weight = torch.where(on, weight, torch.zeros_like(weight))
    count = max(int(on.sum()), 1)
    stats = {f"{sampler}_logp_abs_diff_mean": float(delta.abs().sum()) / count,
             f"{sampler}_logp_abs_diff_max": float(delta.abs().max()) if on.any() else 0.0,
             "tis_clip_fraction": float((capped & on).sum()) / count,
             "tis_weight_mean": float(weight.sum()) / count}
    return weight, stats


def apply_tis(new_logp: torch.Tensor, batch, cap: float | None, sampler: str = "vllm"):
    """The batch the loss sees and the mismatch stats.

    The trainer's log-probs of the sampling policy are the live ones (one optimizer update per rollout batch, and
    the caller checks that the weights have not moved since sampling), so they replace the sampler's as the
    ratio's denominator. Each token's gradient is scaled by its TIS weight through a hook: every objective's
    per-token term depends on the live log-prob of that token only, so this equals weighting each token's loss
    term.
    """
    mask = batch.completion_mask
    old = new_logp.detach()
    weight, stats = tis_weights(old, batch.behaviour_logp, mask, cap, sampler)
    if new_logp.requires_grad and cap is not None:
        weight = weight.to(new_logp.device)
        new_logp.register_hook(lambda grad: grad * weight)
    denominator = torch.where(mask > 0, old, torch.full_like(old, math.nan))
    return dataclasses.replace(batch, behaviour_logp=denominator), stats
