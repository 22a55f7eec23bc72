"""`update_rows`: an update backpropagated a few rows at a time gives the gradient of the whole batch at once, for
losses of every shape (token mean, sequence mean, GSPO's sequence ratio, GEPO's group weight, SFT's likelihood), and
with the prompt detached or not."""
from __future__ import annotations

import pytest
import torch

from stateset_plugins.models.backend import LocalTorchBackend
from tests.helpers.objective_batches import rollout_batch


def _gradient(backend, batch, loss_fn) -> tuple[dict, list[torch.Tensor]]:
    backend.zero_grad()
    stats = backend.forward_backward(batch, loss_fn, temperature=1.0)
    grads = [p.grad.detach().clone() for p in backend._trainable if p.grad is not None]
    backend.zero_grad()
    return stats, grads


@pytest.mark.parametrize("algo", ["grpo", "dapo", "gspo", "gepo", "sft"])
@pytest.mark.parametrize("prompt_gradient", [True, False])
def test_a_chunked_update_has_the_whole_batchs_gradient(tiny, algo, prompt_gradient):
    backend, batch, cfg, obj = rollout_batch(*tiny, "grpo" if algo == "sft" else algo, prompt_gradient=prompt_gradient)
    if algo == "sft":  # SFT's loss on the same sampled rows
        from stateset_plugins.trainers.objectives import get_objective

        obj = get_objective("sft")
        cfg = obj.Config(learning_rate=1e-3, prompt_gradient=prompt_gradient)
        backend = LocalTorchBackend(backend.model, backend.tokenizer, cfg)
    batch.advantages = torch.linspace(-1.0, 1.0, len(batch.sample_ids))
    batch.ref_logp = backend.logprobs(batch, temperature=1.0, reference=True)
    loss = lambda new, b: obj.loss(new, b, cfg)  # noqa: E731
    whole_stats, whole = _gradient(backend, batch, loss)
    cfg.update_rows = 3  # chunks of 3, 3 and 2 rows: not aligned with the groups of 4
    chunked_stats, chunked = _gradient(backend, batch, loss)
    assert whole and len(whole) == len(chunked)
    assert chunked_stats["loss"] == pytest.approx(whole_stats["loss"], rel=1e-5, abs=1e-7)
    norm = max(float(g.abs().max()) for g in whole)
    assert norm > 0
    assert max(float((a - b).abs().max()) for a, b in zip(whole, chunked)) <= 1e-5 * max(norm, 1.0)


def test_update_rows_is_checked():
    from stateset_agents.core.errors import InputError
    from stateset_plugins.trainers.objectives import get_objective

    with pytest.raises(InputError, match="update_rows"):
        get_objective("grpo").Config(update_rows=-1)
    assert get_objective("grpo").Config().update_rows == 0


def test_a_linear_loss_is_accumulated_without_an_extra_forward_pass(tiny, monkeypatch):
    """SFT declares its loss linear in the log-probs: chunked, it runs one forward pass per chunk (no pass without
    gradient first) and still has the whole batch's loss and gradient. Declared wrongly, the gradient is wrong."""
    from stateset_plugins.models import backend as backend_module
    from stateset_plugins.trainers.objectives import get_objective

    base, batch, grpo_cfg, grpo = rollout_batch(*tiny, "grpo")
    obj = get_objective("sft")
    assert obj.linear_in_logprobs and not grpo.linear_in_logprobs
    cfg = obj.Config(learning_rate=1e-3)
    backend = LocalTorchBackend(base.model, base.tokenizer, cfg)
    loss = lambda new, b: obj.loss(new, b, cfg)  # noqa: E731
    whole_stats, whole = _gradient(backend, batch, loss)
    cfg.update_rows = 3
    passes = []
    real = backend_module.completion_logprobs
    monkeypatch.setattr(backend_module, "completion_logprobs",
                        lambda *a, **k: passes.append(torch.is_grad_enabled()) or real(*a, **k))
    backend.zero_grad()
    stats = backend.forward_backward(batch, loss, temperature=1.0, linear=True)
    chunked = [p.grad.detach().clone() for p in backend._trainable if p.grad is not None]
    assert passes == [True, True, True]  # 8 rows in chunks of 3, 3 and 2; every pass with gradient
    assert stats["loss"] == pytest.approx(whole_stats["loss"], rel=1e-5)
    assert stats["nll"] == pytest.approx(whole_stats["nll"], rel=1e-5)
    norm = max(float(g.abs().max()) for g in whole)
    assert max(float((a - b).abs().max()) for a, b in zip(whole, chunked)) <= 1e-5 * max(norm, 1.0)
    # GRPO's loss is not linear: taken at zero, its gradient is not the batch's
    batch.advantages = torch.linspace(-1.0, 1.0, len(batch.sample_ids))
    batch.ref_logp = base.logprobs(batch, temperature=1.0, reference=True)
    grpo_loss = lambda new, b: grpo.loss(new, b, grpo_cfg)  # noqa: E731
    grpo_cfg.update_rows = 0
    _, right = _gradient(base, batch, grpo_loss)
    grpo_cfg.update_rows = 3
    base.zero_grad()
    base.forward_backward(batch, grpo_loss, temperature=1.0, linear=True)
    wrong = [p.grad.detach().clone() for p in base._trainable if p.grad is not None]
    assert max(float((a - b).abs().max()) for a, b in zip(right, wrong)) > 1e-3 * max(
        float(g.abs().max()) for g in right)
