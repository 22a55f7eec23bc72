r"""SFT: supervised fine-tuning on the curated completions.

    L(theta) = -1 / sum_i |y_i| * sum_i sum_t log pi_theta(y_i,t | x_i, y_i,<t)

(token-level mean negative log-likelihood of the completion tokens only; prompt tokens are context). No sampling,
no reward during training; ``temperature`` and ``max_new_tokens`` are unused (the evaluation has its own protocol,
`evaluation.EvalProtocol`: greedy by default).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import TrainConfig
from .base import Objective
from .common import masked_token_mean, safe


@dataclass
class SFTConfig(TrainConfig):
    algorithm = "sft"


class SFT(Objective):
    name, stem, Config = "sft", "SFT", SFTConfig
    ddp_loss = "tokens"  # `Objective.ddp_loss`
    linear_in_logprobs = True  # `Objective.linear_in_logprobs`: the NLL is a weighted sum of the log-probs
    rollout = "none"

    def advantages(self, rewards, group_size: int, config: SFTConfig):
        return rewards * 0

    def loss(self, new_logp, batch, config: SFTConfig):
        mask = batch.completion_mask
        nll = masked_token_mean(-safe(new_logp, mask), mask)
        return nll, {"nll": float(nll.detach())}
