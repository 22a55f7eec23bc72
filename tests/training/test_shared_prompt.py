"""Rows that repeat a prompt (a GRPO group's G samples) compute it once, with the full gradient: the same log-probs
and the same gradient as the batch computed row by row, for a fraction of the prompt's work."""
from __future__ import annotations

import pytest
import torch

from stateset_plugins.models import backend as backend_module
from stateset_plugins.models.backend import completion_logprobs
from tests.helpers.objective_batches import rollout_batch


def _tokens_forwarded(model) -> tuple[list[int], object]:
    """Counts the token positions each forward pass of `model` runs (a hook on the input embeddings)."""
    counts: list[int] = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, inp, out: counts.append(inp[0].numel()))
    return counts, hook


def _gradient(backend, batch, loss_fn, share: bool):
    backend.zero_grad()
    new = completion_logprobs(backend.model, batch, 1.0, share_prompts=share)
    loss, _ = loss_fn(new, batch)
    loss.backward()
    return new.detach(), [p.grad.detach().clone() for p in backend._trainable]


@pytest.fixture()
def no_work_floor(monkeypatch):
    # the tiny model is below the work a shared prompt must save to be used: lower the floor to exercise the path
    monkeypatch.setitem(backend_module.SHARED_PREFILL_MIN_WORK, "cpu", 0)


def test_a_repeated_prompt_is_computed_once_with_the_same_log_probs_and_gradient(tiny, no_work_floor):
    backend, batch, cfg, obj = rollout_batch(*tiny, "grpo", n_prompts=2, g=4)
    assert (batch.attention_mask[:, :batch.prompt_width] == 0).any()  # left padding is exercised
    batch.advantages = torch.linspace(-1.0, 1.0, len(batch.sample_ids))
    with torch.no_grad():
        batch.ref_logp = completion_logprobs(backend.model, batch, 1.0, share_prompts=False)
    # a step first, so the adapter is not zero (LoRA's B starts at zero: the prompt's keys would not depend on it)
    loss_fn = lambda new, b: obj.loss(new, b, cfg)  # noqa: E731
    _gradient(backend, batch, loss_fn, share=False)
    backend.optimizer_step()

    counts, hook = _tokens_forwarded(backend.model)
    try:
        shared_logp, shared_grad = _gradient(backend, batch, loss_fn, share=True)
        shared_tokens = sum(counts)
        counts.clear()
        full_logp, full_grad = _gradient(backend, batch, loss_fn, share=False)
        full_tokens = sum(counts)
    finally:
        hook.remove()
    rows, cut = batch.input_ids.shape[0], batch.prompt_width - 1
    assert full_tokens == batch.input_ids.numel()
    assert shared_tokens == 2 * cut + rows * (batch.input_ids.shape[1] - cut)  # two prompts, once each
    m = batch.completion_mask > 0
    assert (shared_logp[m] - full_logp[m]).abs().max() < 1e-5
    norm = max(float(g.abs().max()) for g in full_grad)
    assert norm > 0
    assert max(float((a - b).abs().max()) for a, b in zip(shared_grad, full_grad)) <= 1e-5 * norm
    # the prompt's share of the gradient is in it: the same update without it differs
    backend.zero_grad()
    loss_fn(completion_logprobs(backend.model, batch, 1.0, prompt_gradient=False), batch)[0].backward()
    detached = [p.grad.detach().clone() for p in backend._trainable]
    assert max(float((a - b).abs().max()) for a, b in zip(detached, full_grad)) > 1e-3 * norm


def test_the_backend_shares_prompts_in_its_scoring_and_update_passes(tiny, no_work_floor):
    backend, batch, cfg, obj = rollout_batch(*tiny, "grpo", n_prompts=2, g=4)
    counts, hook = _tokens_forwarded(backend.model)
    try:
        batch.ref_logp = backend.logprobs(batch, temperature=1.0, reference=True)
        batch.advantages = torch.linspace(-1.0, 1.0, len(batch.sample_ids))
        backend.forward_backward(batch, lambda new, b: obj.loss(new, b, cfg), temperature=1.0)
    finally:
        hook.remove()
    assert len(counts) == 4 and sum(counts) < 2 * batch.input_ids.numel()  # head + rest, twice


def test_distinct_prompts_and_small_savings_take_the_plain_path(tiny):
    backend, batch, _, _ = rollout_batch(*tiny, "grpo", n_prompts=2, g=4)
    assert batch.groups[3] != batch.groups[4]
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(backend_module.SHARED_PREFILL_MIN_WORK, "cpu", 0)
        assert backend_module.repeated_prompts(backend.model, batch.rows(3, 5)) is None  # nothing repeats
        assert backend_module.repeated_prompts(backend.model, batch) is not None
    assert backend_module.repeated_prompts(backend.model, batch) is None  # the tiny model saves too little


def test_under_gradient_checkpointing_the_shared_prompt_gives_the_same_log_probs_and_gradient(tiny_model_dir,
                                                                                              no_work_floor):
    """Checkpointed layers run again in backward: the head's and the completion's caches must give that replay
    what the first pass saw (a cache that grew again, or one dropped, fails this)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def fresh():  # the same weights twice: one model is wrapped with an adapter once
        return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)

    plain = rollout_batch(*fresh(), "grpo", n_prompts=2, g=4)
    checkpointed = rollout_batch(*fresh(), "grpo", n_prompts=2, g=4, gradient_checkpointing=True)
    assert checkpointed[0].gradient_checkpointing and not plain[0].gradient_checkpointing
    results = []
    for backend, batch, cfg, obj in (plain, checkpointed):
        batch.advantages = torch.linspace(-1.0, 1.0, len(batch.sample_ids))
        with torch.no_grad():
            batch.ref_logp = completion_logprobs(backend.model, batch, 1.0, share_prompts=False)
        loss_fn = lambda new, b, obj=obj, cfg=cfg: obj.loss(new, b, cfg)  # noqa: E731
        _gradient(backend, batch, loss_fn, share=False)
        backend.optimizer_step()  # the adapter is not zero after a step: the prompt's gradient shows
        counts, hook = _tokens_forwarded(backend.model)
        try:
            shared = _gradient(backend, batch, loss_fn, share=True)
        finally:
            hook.remove()
        results.append((shared, _gradient(backend, batch, loss_fn, share=False), counts))
    (plain_shared, plain_full, _), (ckpt_shared, ckpt_full, ckpt_counts) = results
    rows, cut = checkpointed[1].input_ids.shape[0], checkpointed[1].prompt_width - 1
    width = checkpointed[1].input_ids.shape[1]
    assert sum(ckpt_counts) == 2 * cut + rows * (width - cut)  # two prompt heads, then the rows' completions
    m = checkpointed[1].completion_mask > 0
    norm = max(float(g.abs().max()) for g in ckpt_full[1])
    assert norm > 0
    for logp, grad in (ckpt_shared, plain_shared, plain_full):
        assert (logp[m] - ckpt_full[0][m]).abs().max() < 1e-5
        assert max(float((a - b).abs().max()) for a, b in zip(grad, ckpt_full[1])) <= 1e-5 * norm


def test_models_whose_cache_is_not_plain_full_attention_take_the_plain_path():
    """A sliding-window layer's cache keeps only the window: the shared prompt's plain caches would attend past it."""
    from types import SimpleNamespace

    from transformers import LlamaConfig, MistralConfig

    from stateset_plugins.models import scoring

    sizes = {"num_hidden_layers": 3, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
             "num_key_value_heads": 2}
    assert scoring._layer_count(SimpleNamespace(config=LlamaConfig(**sizes))) == 3
    assert scoring._layer_count(SimpleNamespace(config=MistralConfig(sliding_window=8, **sizes))) is None
