"""`prompt_gradient: false` (the quickstart's CPU recipe): the prompt's keys and values computed without gradient,
once per distinct prompt, the completion on top of them with gradient. Same log-probs, a cheaper update."""
from __future__ import annotations

import torch
from objective_batches import rollout_batch

from stateset_plugins.trainers.backend import completion_logprobs
from stateset_plugins.trainers.objectives import get_objective


def test_detached_prompt_gives_the_same_log_probs_and_moves_the_completion_only(tiny):
    backend, batch, cfg, _ = rollout_batch(*tiny, "grpo")
    m = batch.completion_mask > 0
    assert (batch.attention_mask[:, :batch.prompt_width] == 0).any()  # left padding is exercised
    with torch.no_grad():
        full = completion_logprobs(backend.model, batch, cfg.temperature)
        detached = completion_logprobs(backend.model, batch, cfg.temperature, prompt_gradient=False)
    assert (full[m] - detached[m]).abs().max() < 1e-4
    # the ratio against the recorded behaviour log-probs stays 1, so the objectives see an on-policy batch
    assert torch.exp(detached[m] - batch.behaviour_logp[m]).sub(1).abs().max() < 1e-4

    sft = get_objective("sft")
    scfg = sft.Config(learning_rate=1e-3, prompt_gradient=False)
    from stateset_plugins.trainers.backend import LocalTorchBackend

    backend = LocalTorchBackend(backend.model, backend.tokenizer, scfg)
    assert backend._prompt_gradient is False
    before = (backend.logprobs(batch, temperature=1.0) * batch.completion_mask).sum(-1)
    stats = backend.forward_backward(batch, lambda new, b: sft.loss(new, b, scfg), temperature=1.0)
    assert stats["loss"] > 0
    backend.optimizer_step()
    after = (backend.logprobs(batch, temperature=1.0) * batch.completion_mask).sum(-1)
    assert (after > before).all(), after - before  # SFT raised every completion's likelihood


def test_the_default_keeps_the_full_gradient():
    assert get_objective("grpo").Config().prompt_gradient is True
    assert get_objective("sft").Config().prompt_gradient is True
