"""The backend's types: one sampled completion (`Generation`), one sample before collation (`Sample`), the batch an
update sees (`Batch`) and how it is laid out, and the error for a batch that must not be trained on
(`IntegrityError`).

Each row is ``[left-padded prompt | completion region, right-padded]``. The completion region holds the sampled
tokens (single turn) or the whole episode after the first prompt (multi-turn: agent tokens and replayed
environment tokens); ``completion_mask`` is 1 only where the policy sampled the token and the loss applies.
Position ids are ``cumsum(attention_mask) - 1``, the same rule `generate` uses with left padding, so log-probs
computed here match the ones recorded at sampling time.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Sequence

import torch


class IntegrityError(RuntimeError):
    """A batch that must not be trained on. Names the sample so the user can find it."""

    def __init__(self, sample: str, problem: str):
        self.sample, self.problem = sample, problem
        super().__init__(f"integrity check failed for sample {sample}: {problem}")


@dataclass
class Generation:
    """One sampled completion: its token ids (through the first end-of-sequence token, which is kept) and the
    behaviour log-prob of each, taken from the scores `generate` sampled from (after temperature)."""

    ids: list[int]
    logps: list[float]
    truncated: bool  # ran into max_new_tokens without an end-of-sequence token


@dataclass
class Sample:
    """One sample before collation: prompt ids, completion-region ids, which of those were sampled, and the
    behaviour log-prob recorded for each sampled token (None elsewhere)."""

    sample_id: str
    group: str
    prompt_ids: list[int]
    completion_ids: list[int]
    sampled: list[bool]
    behaviour_logp: list[float | None]
    truncated: bool = False


@dataclass
class Batch:
    input_ids: torch.Tensor          # [N, P + C] long
    attention_mask: torch.Tensor     # [N, P + C] long
    prompt_width: int                # P
    completion_mask: torch.Tensor    # [N, C] float, 1 where the token was sampled by the policy
    behaviour_logp: torch.Tensor     # [N, C] float, NaN where nothing was sampled
    sample_ids: list[str]
    groups: list[str]
    group_size: int
    rewards: torch.Tensor = field(default_factory=lambda: torch.zeros(0))     # [N]
    advantages: torch.Tensor = field(default_factory=lambda: torch.zeros(0))  # [N]
    ref_logp: torch.Tensor | None = None                                       # [N, C]
    # critic objectives (PPO, VAPO): per-token advantages and value targets from GAE, and the values at sampling
    token_advantages: torch.Tensor | None = None                               # [N, C]
    returns: torch.Tensor | None = None                                        # [N, C]
    old_values: torch.Tensor | None = None                                     # [N, C]

    @property
    def completion_width(self) -> int:
        return self.input_ids.shape[1] - self.prompt_width

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_width:]

    @property
    def position_ids(self) -> torch.Tensor:
        return (self.attention_mask.cumsum(-1) - 1).clamp(min=0)

    def sampled_tokens(self) -> int:
        return int(self.completion_mask.sum().item())

    def rows(self, start: int, stop: int) -> "Batch":
        """Rows start..stop-1, in the same padded layout (same prompt and completion widths)."""
        cut = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == len(self.sample_ids):
                value = value[start:stop]
            elif isinstance(value, list):
                value = value[start:stop]
            cut[f.name] = value
        return Batch(**cut)


def collate(samples: Sequence[Sample], pad_id: int, group_size: int) -> Batch:
    if not samples:
        raise ValueError("cannot collate an empty batch")
    width_p = max(len(s.prompt_ids) for s in samples)
    width_c = max(1, max(len(s.completion_ids) for s in samples))
    n = len(samples)
    ids = torch.full((n, width_p + width_c), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width_p + width_c), dtype=torch.long)
    cmask = torch.zeros((n, width_c))
    blogp = torch.full((n, width_c), math.nan)
    for i, s in enumerate(samples):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        ids[i, width_p - p:width_p] = torch.tensor(s.prompt_ids, dtype=torch.long)
        attn[i, width_p - p:width_p + c] = 1
        if c:
            ids[i, width_p:width_p + c] = torch.tensor(s.completion_ids, dtype=torch.long)
            cmask[i, :c] = torch.tensor([float(x) for x in s.sampled])
            blogp[i, :c] = torch.tensor([math.nan if v is None else float(v) for v in s.behaviour_logp])
    return Batch(input_ids=ids, attention_mask=attn, prompt_width=width_p, completion_mask=cmask,
                 behaviour_logp=blogp, sample_ids=[s.sample_id for s in samples],
                 groups=[s.group for s in samples], group_size=group_size)
