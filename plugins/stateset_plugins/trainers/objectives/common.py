"""Pieces the objectives share: group advantages, the clipped surrogate, the k3 KL estimate, masked means."""
from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True, eps: float = 1e-4, *,
                     unbiased: bool = False) -> torch.Tensor:
    """A_i = (r_i - mean(r_group)) / (std(r_group) + eps), the std over n (or n - 1 with ``unbiased``); without
    ``scale`` only centred. Rows of one group are contiguous. A group whose rewards are all equal gets zero advantage
    (it carries no signal)."""
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (grouped.std(dim=1, keepdim=True, unbiased=unbiased) + eps)
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


def sequence_log_ratio(new: torch.Tensor, old: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i = mean_t (log pi_theta - log pi_old): GSPO's length-normalised sequence ratio, in log space. [N]"""
    return masked_sequence_mean(new - old, mask)


def group_expectation_log_weight(new: torch.Tensor, old: torch.Tensor, mask: torch.Tensor, group_size: int
                                 ) -> torch.Tensor:
    """GEPO's log w_i = log p_theta(o_i) - log E_q[q(o)], E_q[q] ~= sum_j q_j^2 / sum_j q_j over the group. [N]

    p and q are length-normalised sequence probabilities (the per-token geometric mean, exp(mean_t log p)), so a
    long completion does not underflow to 0; everything stays in log space (logsumexp), so neither does the group
    expectation. Since q_min <= E_q[q] <= q_max and p <= 1, w_i <= 1 / min_j q_j: bounded by the behaviour
    sampler's own group, however stale it is.
    """
    log_p = masked_sequence_mean(new, mask)
    log_q = masked_sequence_mean(old, mask).view(-1, group_size)
    log_eq = torch.logsumexp(2 * log_q, dim=1) - torch.logsumexp(log_q, dim=1)
    return log_p - log_eq.repeat_interleave(group_size)


def policy_loss(new_logp: torch.Tensor, batch, beta: float, low: float, high: float, *, token_level: bool,
                ratio_level: str = "token") -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy-gradient loss the sampling objectives share, with their switches: aggregation (token or
    sequence mean), the ratio's level (token, GSPO's sequence, GEPO's group expectation) and the advantages
    (``batch.token_advantages`` from GAE when present, else the sequence advantage on every token)."""
    mask = batch.completion_mask
    new = safe(new_logp, mask)
    old = safe(batch.behaviour_logp, mask)
    if ratio_level == "token":
        ratio = torch.exp(new - old)
    else:
        # a sequence-level weight w_i in token form sg[w_i] * pi/sg[pi]: value w_i, gradient w_i * grad(log pi_t),
        # averaged over the sequence's tokens, the same as differentiating w_i itself
        if ratio_level == "sequence":
            log_w = sequence_log_ratio(new, old, mask)
        elif ratio_level == "group":
            log_w = group_expectation_log_weight(new, old, mask, batch.group_size)
        else:
            raise ValueError(f"unknown ratio level {ratio_level!r}")
        ratio = torch.exp(log_w.detach()[:, None] + new - new.detach())
    adv = batch.token_advantages if batch.token_advantages is not None else batch.advantages[:, None]
    per_token, active = clipped_surrogate(ratio, adv, low, high)
    stats = {"clip_fraction": float(masked_token_mean(active.float(), mask))}
    per_token = per_token + kl_term(new, batch, beta, stats)
    loss = masked_token_mean(per_token, mask) if token_level else masked_sequence_mean(per_token, mask).mean()
    return loss, stats


def kl_term(new: torch.Tensor, batch, beta: float, stats: dict[str, float]) -> torch.Tensor | float:
    """beta * k3 per token (0 without a KL term); records the batch's KL estimate in ``stats`` when reference
    log-probs are present."""
    mask = batch.completion_mask
    kl = None
    if batch.ref_logp is not None:
        kl = k3_kl(new, safe(batch.ref_logp, mask))
        stats["kl"] = float(masked_token_mean(kl.detach(), mask))
    if beta > 0:
        if kl is None:
            raise ValueError("beta > 0 needs reference log-probs")
        return beta * kl
    return 0.0


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the masked (sampled) tokens of each row: [N, C] -> (A, returns).

        delta_t = r_t + gamma V_{t+1} - V_t,   A_t = sum_l (gamma lam)^l delta_{t+l},   returns_t = A_t + V_t

    Unmasked positions (environment tokens, padding) are skipped, not treated as steps: the next state of a sampled
    token is the next sampled token; after the last one V = 0 (the episode ends). ``lam`` is a float or a per-row
    tensor [N] (VAPO's length-adaptive lambda).
    """
    n, width = rewards.shape
    lam = torch.as_tensor(lam, dtype=values.dtype).expand(n)
    adv = torch.zeros_like(values)
    next_value = torch.zeros(n, dtype=values.dtype)
    running = torch.zeros(n, dtype=values.dtype)
    for t in range(width - 1, -1, -1):
        on = mask[:, t] > 0
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a = delta + gamma * lam * running
        adv[:, t] = torch.where(on, a, torch.zeros_like(a))
        running = torch.where(on, a, running)
        next_value = torch.where(on, values[:, t], next_value)
    return adv, (adv + values) * mask


def terminal_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The sequence reward placed on each row's last sampled token: [N] -> [N, C]."""
    positions = torch.arange(mask.shape[1]).expand_as(mask)
    last = torch.where(mask > 0, positions, torch.full_like(positions, -1)).max(dim=1).values
    out = torch.zeros_like(mask, dtype=torch.float32)
    out[torch.arange(mask.shape[0]), last.clamp(min=0)] = rewards.float()
    return out * mask
