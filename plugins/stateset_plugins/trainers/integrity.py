"""Checks a batch must pass before it may change the adapter. The first violation raises `IntegrityError`
naming the sample; nothing is updated and the last good checkpoint stays the latest."""
from __future__ import annotations

from collections import Counter

import torch

from stateset_plugins.models.batch import Batch, IntegrityError


def check_batch(batch: Batch, vocab_size: int, *, needs_behaviour: bool, needs_reference: bool) -> None:
    n, width = batch.input_ids.shape
    c = batch.completion_width
    ids = batch.sample_ids
    expect = {"attention_mask": (n, width), "completion_mask": (n, c), "behaviour_logp": (n, c)}
    if needs_reference:
        expect["ref_logp"] = (n, c)
    for name, shape in expect.items():
        got = getattr(batch, name)
        if got is None or tuple(got.shape) != shape:
            raise IntegrityError("batch", f"{name} has shape {None if got is None else tuple(got.shape)}, "
                                          f"expected {shape}")
    for name in ("rewards", "advantages"):
        if tuple(getattr(batch, name).shape) != (n,):
            raise IntegrityError("batch", f"{name} has shape {tuple(getattr(batch, name).shape)}, expected ({n},)")
    if len(ids) != n or len(batch.groups) != n:
        raise IntegrityError("batch", f"{len(ids)} sample ids / {len(batch.groups)} groups for {n} rows")

    def first_bad(rows: torch.Tensor) -> str:
        return ids[int(rows.nonzero()[0, 0])]

    bad = ((batch.input_ids < 0) | (batch.input_ids >= vocab_size)).any(-1)
    if bad.any():
        raise IntegrityError(first_bad(bad), f"token id outside the vocabulary [0, {vocab_size})")
    for name in ("attention_mask", "completion_mask"):
        m = getattr(batch, name)
        bad = ((m != 0) & (m != 1)).any(-1)
        if bad.any():
            raise IntegrityError(first_bad(bad), f"{name} holds values other than 0 and 1")
    trained = batch.completion_mask > 0
    bad = (trained & (batch.attention_mask[:, batch.prompt_width:] == 0)).any(-1)
    if bad.any():
        raise IntegrityError(first_bad(bad), "a trained token is masked out of attention (padding)")
    bad = ~trained.any(-1)
    if bad.any():
        raise IntegrityError(first_bad(bad), "no trainable token in the completion")
    bad = ~torch.isfinite(batch.rewards)
    if bad.any():
        raise IntegrityError(first_bad(bad), f"reward is not finite ({float(batch.rewards[bad][0])})")
    bad = ~torch.isfinite(batch.advantages)
    if bad.any():
        raise IntegrityError(first_bad(bad), "advantage is not finite")
    if needs_behaviour:
        bad = (trained & ~torch.isfinite(batch.behaviour_logp)).any(-1)
        if bad.any():
            raise IntegrityError(first_bad(bad), "a sampled token has no finite behaviour log-prob "
                                                 "(it must be recorded at generation time, never invented)")
        bad = (trained & (batch.behaviour_logp > 1e-4)).any(-1)
        if bad.any():
            raise IntegrityError(first_bad(bad), "a behaviour log-prob is positive")
    if needs_reference:
        bad = (trained & ~torch.isfinite(batch.ref_logp)).any(-1)
        if bad.any():
            raise IntegrityError(first_bad(bad), "a reference log-prob is not finite")
    for name in ("token_advantages", "returns", "old_values"):  # critic objectives' GAE outputs
        got = getattr(batch, name, None)
        if got is None:
            continue
        if tuple(got.shape) != (n, c):
            raise IntegrityError("batch", f"{name} has shape {tuple(got.shape)}, expected {(n, c)}")
        bad = (trained & ~torch.isfinite(got)).any(-1)
        if bad.any():
            raise IntegrityError(first_bad(bad), f"{name} is not finite")
    _check_groups(batch)


def _check_groups(batch: Batch) -> None:
    """Groups are contiguous runs of exactly group_size samples of one prompt."""
    g = batch.group_size
    n = len(batch.groups)
    if g < 1 or n % g:
        raise IntegrityError(batch.sample_ids[-1], f"{n} samples do not split into groups of {g}")
    seen = Counter()
    for start in range(0, n, g):
        block = batch.groups[start:start + g]
        if len(set(block)) != 1:
            odd = next(i for i in range(start, start + g) if batch.groups[i] != block[0])
            raise IntegrityError(batch.sample_ids[odd], f"group of prompt {block[0]!r} mixes in another prompt")
        seen[block[0]] += 1
        if g > 1:
            prompts = batch.input_ids[start:start + g, :batch.prompt_width]
            if not (prompts == prompts[0]).all():
                raise IntegrityError(batch.sample_ids[start], "samples of one group have different prompts")
    dup = [k for k, v in seen.items() if v > 1]
    if dup:
        raise IntegrityError(dup[0], "the same group appears twice in one batch")
