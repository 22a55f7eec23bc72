"""Rollouts sampled from a bfloat16 copy of the weights (``rollout_dtype: bfloat16``), trained in float32.

Decoding reads every weight once per token, and a CPU with AMX (or any GPU) multiplies bfloat16 several times
faster than float32 at the few rows a decoding step has; the update keeps float32, where gradients and AdamW need
it. The sampler is the training model itself with each parameter's storage swapped for its bfloat16 copy while
``generate`` runs, and swapped back after: the frozen weights (base, embeddings, norms) are cast once and kept (half
the float32 size again in memory), the adapter's trainable weights are cast afresh whenever the policy version
moved, so the sampler always holds the policy being trained, rounded.

Rounding changes the log-probs a little, so the rollouts are slightly off-policy for the float32 trainer: the loss
takes the truncated importance correction of `importance` (the trainer's log-probs of the sampling policy as the
ratio's denominator, each token weighted by min(exp(logp_trainer - logp_bfloat16), C)), and each update reports
the mismatch as ``bfloat16_logp_abs_diff_mean`` / ``_max``.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

from .batch import Generation

#: rollout_dtype -> torch dtype of the sampler's copy (float32: the trainer's own weights sample)
ROLLOUT_DTYPES = {"float32": None, "bfloat16": torch.bfloat16}


class LowPrecisionRollout:
    """``generate`` on the training model with its parameters in `dtype`; the sampling policy's version is kept for
    the importance correction (which holds only while the weights have not moved since sampling)."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype, sample: Callable[..., list[Generation]]):
        self.model, self.dtype, self._sample = model, dtype, sample
        self.name = str(dtype).removeprefix("torch.")  # the mismatch stats are named after it
        self.sampled_version: int | None = None  # the policy version of the last adapter rollout
        self._frozen: dict[int, torch.Tensor] = {}  # id(parameter) -> its copy, made once
        self._trainable: tuple[int, list[torch.Tensor]] | None = None  # (version, copies) of the adapter's weights

    def _copies(self, version: int) -> list[tuple[torch.nn.Parameter, torch.Tensor]]:
        params = [p for p in self.model.parameters() if p.dtype != self.dtype]
        if self._trainable is None or self._trainable[0] != version:
            self._trainable = (version, [p.detach().to(self.dtype) for p in params if p.requires_grad])
        trained = iter(self._trainable[1])
        pairs = []
        for p in params:
            if p.requires_grad:
                pairs.append((p, next(trained)))
            else:
                copy = self._frozen.get(id(p))
                if copy is None:
                    copy = self._frozen[id(p)] = p.detach().to(self.dtype)
                pairs.append((p, copy))
        return pairs

    @contextlib.contextmanager
    def weights(self, version: int) -> Iterator[None]:
        """The model's parameters in `dtype` inside the block, their own storage again after it (also on error)."""
        pairs = self._copies(version)
        originals = [p.data for p, _ in pairs]
        try:
            for p, copy in pairs:
                p.data = copy
            yield
        finally:
            for (p, _), original in zip(pairs, originals):
                p.data = original

    def generate(self, prompts, *, max_new_tokens: int, temperature: float, adapter: bool = True,
                 version: int) -> list[Generation]:
        with self.weights(version):
            gens = self._sample(prompts, max_new_tokens=max_new_tokens, temperature=temperature, adapter=adapter)
        if adapter:
            self.sampled_version = version
        return gens
