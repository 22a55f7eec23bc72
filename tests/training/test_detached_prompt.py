"""`prompt_gradient: false` (the quickstart's CPU recipe): the prompt's keys and values computed without gradient,
once per distinct prompt, the completion on top of them with gradient. Same log-probs, a cheaper update."""
from __future__ import annotations

import torch

from stateset_plugins.models.backend import completion_logprobs
from stateset_plugins.trainers.objectives import get_objective
from tests.helpers.objective_batches import rollout_batch


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
    from stateset_plugins.models.backend import LocalTorchBackend

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


def test_a_prefix_all_prompts_share_is_computed_once_with_the_same_answers_and_log_probs(tiny, monkeypatch):
    from stateset_plugins.models import backend as backend_module
    from stateset_plugins.models.batch import Sample, collate
    from stateset_plugins.models.rendering import ChatRenderer

    model, tokenizer = tiny
    cfg = get_objective("grpo").Config(num_generations=2, max_new_tokens=6, prompt_gradient=False)
    backend = backend_module.LocalTorchBackend(model, tokenizer, cfg)
    renderer = ChatRenderer(tokenizer, 256)
    system = {"role": "system", "content": "You are the support assistant of a store; look orders up, be brief. " * 3}
    prompts = [renderer.prompt_ids([system, {"role": "user", "content": t}], None)
               for t in ("hello", "my order A1 is late", "refund B2 please, it broke")]
    shared = backend_module.common_prefix_length(prompts)
    assert shared >= backend_module.COMMON_PREFIX_MIN_TOKENS and len({len(p) for p in prompts}) == 3
    calls = []
    original = backend_module.prefix_cache
    monkeypatch.setattr(backend_module, "prefix_cache", lambda *a: calls.append(a[1].shape[0]) or original(*a))
    greedy = backend.generate(prompts, max_new_tokens=6, temperature=0.0)
    assert calls == [shared]
    monkeypatch.setattr(backend_module, "COMMON_PREFIX_MIN_TOKENS", 10 ** 6)  # the plain left-padded path
    plain = backend.generate(prompts, max_new_tokens=6, temperature=0.0)
    assert [g.ids for g in greedy] == [g.ids for g in plain]
    for a, b in zip(greedy, plain):
        assert max(abs(x - y) for x, y in zip(a.logps, b.logps)) < 1e-4
    monkeypatch.setattr(backend_module, "COMMON_PREFIX_MIN_TOKENS", 32)
    batch = collate([Sample(f"s{i}", f"s{i}", p, g.ids, [True] * len(g.ids), g.logps)
                     for i, (p, g) in enumerate(zip(prompts, greedy))], backend.pad_id, 1)
    with torch.no_grad():
        full = completion_logprobs(backend.model, batch, 1.0)
        detached = completion_logprobs(backend.model, batch, 1.0, prompt_gradient=False)
    m = batch.completion_mask > 0
    assert (full[m] - detached[m]).abs().max() < 1e-4
    assert (full[m] - batch.behaviour_logp[m]).abs().max() < 1e-4
