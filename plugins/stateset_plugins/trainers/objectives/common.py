"""Pieces the objectives share: group advantages, the clipped surrogate, the k3 KL estimate, masked means."""
from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-4) -> torch.Tensor:
    """A_i = (r_i - mean(r_group)) / (std(r_group) + eps); without ``scale`` only centred. Rows of one group are
    contiguous. A group whose rewards are all equal gets zero advantage (it carries no signal)."""
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (grouped.std(dim=1, keepdim=True, unbiased=False) + eps)
    return centred.reshape(-1)


def zero_variance_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    grouped = rewards.view(-1, group_size)
    return (grouped.max(dim=1).values - grouped.min(dim=1).values) == 0


def k3_kl(new_logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi || ref) estimate exp(ref - new) - (ref - new) - 1 (Schulman's k3; always >= 0)."""
    delta = ref_logp - new_logp
    return torch.exp(delta) - delta - 1


def clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, low: float, high: float
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token loss -min(r A, clip(r, 1 - low, 1 + high) A) and where the clip was the active branch."""
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - low, 1 + high) * adv
    active = clipped < unclipped
    return -torch.minimum(unclipped, clipped), active


def masked_sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over each row's masked tokens: [N, C] -> [N]."""
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def masked_token_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over every masked token of the batch (token-level aggregation)."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def safe(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Zero where the mask is 0, so NaN placeholders never reach a gradient."""
    return torch.where(mask > 0, logp, torch.zeros_like(logp))


def policy_loss(new_logp: torch.Tensor, batch, beta: float, low: float, high: float, *, token_level: bool,
                sequence_ratio: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy-gradient loss the sampling objectives share, with their three switches."""
    mask = batch.completion_mask
    new = safe(new_logp, mask)
    old = safe(batch.behaviour_logp, mask)
    if sequence_ratio:
        # s_i = exp(mean_t(new - old)); the token form sg[s_i] * pi/sg[pi] has value s_i and gradient
        # s_i * grad(log pi_t), the same as the sequence ratio's.
        log_s = masked_sequence_mean(new - old, mask).detach()
        ratio = torch.exp(log_s[:, None] + new - new.detach())
    else:
        ratio = torch.exp(new - old)
    per_token, active = clipped_surrogate(ratio, batch.advantages[:, None], low, high)
    stats = {"clip_fraction": float(masked_token_mean(active.float(), mask))}
    kl = None
    if batch.ref_logp is not None:
        kl = k3_kl(new, safe(batch.ref_logp, mask))
        stats["kl"] = float(masked_token_mean(kl.detach(), mask))
    if beta > 0:
        if kl is None:
            raise ValueError("beta > 0 needs reference log-probs")
        per_token = per_token + beta * kl
    loss = masked_token_mean(per_token, mask) if token_level else masked_sequence_mean(per_token, mask).mean()
    return loss, stats
