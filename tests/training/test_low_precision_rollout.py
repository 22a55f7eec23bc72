"""``rollout_dtype: bfloat16``: rollouts sampled from a bfloat16 copy of the weights, the update in float32 with the
truncated importance correction. The float32 weights come back untouched, the loss's ratio is taken against the
trainer's own log-probs of the sampling policy, each token's gradient carries its TIS weight, the sampler follows
the adapter as it trains, and a batch sampled before an update is refused."""
from __future__ import annotations

import json

import pytest
import torch

from stateset_agents.core.errors import InputError
from stateset_plugins.models.batch import IntegrityError
from stateset_plugins.models.low_precision import LowPrecisionRollout
from stateset_plugins.trainers.objectives import get_objective
from tests.helpers.objective_batches import rollout_batch


def _grpo_loss(cfg, obj):
    return lambda new, b: obj.loss(new, b, cfg)  # noqa: E731


def _gradient(backend, batch, loss_fn):
    backend.zero_grad()
    stats = backend.forward_backward(batch, loss_fn, temperature=0.8)
    grads = [p.grad.detach().clone() for p in backend._trainable if p.grad is not None]
    backend.zero_grad()
    return stats, grads


def test_the_setting_is_checked():
    config = get_objective("grpo").Config
    with pytest.raises(InputError, match="rollout_dtype") as bad:
        config(rollout_dtype="float16")
    assert bad.value.field == "rollout_dtype"
    with pytest.raises(InputError, match="vLLM takes its own"):
        config(rollout_dtype="bfloat16", rollout_engine="vllm")
    with pytest.raises(InputError, match="rollout_dtype float32") as reuse:
        config(rollout_dtype="bfloat16", num_iterations=2, steps=4, save_every=2)
    assert reuse.value.field == "num_iterations"
    assert config().rollout_dtype == "float32"


def test_sampling_in_bfloat16_leaves_the_float32_weights_as_they_were(tiny, monkeypatch):
    from peft.tuners.lora.layer import Linear as LoraLinear

    peft_calls, peft_forward = [], LoraLinear.forward

    def counted(self, *args, **kwargs):
        peft_calls.append(1)
        return peft_forward(self, *args, **kwargs)
    monkeypatch.setattr(LoraLinear, "forward", counted)
    model, tokenizer = tiny
    before = [(p, p.detach().clone()) for p in model.parameters()]  # PEFT wraps these very parameters
    backend, batch, cfg, obj = rollout_batch(model, tokenizer, "grpo", rollout_dtype="bfloat16")
    assert isinstance(backend.rollout, LowPrecisionRollout) and backend.rollout.sampled_version == 0
    assert all(p.dtype == torch.float32 and torch.equal(p.data, kept) for p, kept in before)
    assert all(p.dtype == torch.float32 for p in backend.model.parameters())
    assert not peft_calls  # the lean LoRA path ran in bfloat16 too, not PEFT's casting one
    # the behaviour log-probs are the bfloat16 model's: close to the float32 trainer's, not equal to them
    mask = batch.completion_mask > 0
    trainer = backend.logprobs(batch, temperature=0.8)
    diff = (trainer - batch.behaviour_logp)[mask].abs()
    assert torch.isfinite(diff).all() and 0 < float(diff.mean()) < 0.1


def test_the_loss_takes_the_trainers_logprobs_and_each_tokens_weight(tiny):
    backend, batch, cfg, obj = rollout_batch(*tiny, "grpo", rollout_dtype="bfloat16")
    batch.advantages = torch.linspace(-1.0, 1.0, len(batch.sample_ids))
    batch.ref_logp = backend.logprobs(batch, temperature=0.8, reference=True)
    seen = {}

    def loss_fn(new, b):
        seen["denominator"] = b.behaviour_logp.clone()
        return obj.loss(new, b, cfg)

    mask = batch.completion_mask > 0
    cfg.tis_cap = None  # weight 1 everywhere: the reference gradient
    _, uncapped_grads = _gradient(backend, batch, loss_fn)
    trainer = backend.logprobs(batch, temperature=0.8)
    assert torch.allclose(seen["denominator"][mask], trainer[mask], atol=1e-6)  # ratio 1: clipping cannot act
    # every token's ratio exp(logp_trainer - logp_bf16) is within a few % of 1, so a cap of 0.5 weights each by 0.5
    cfg.tis_cap = 0.5
    stats, capped_grads = _gradient(backend, batch, loss_fn)
    assert stats["tis_clip_fraction"] == pytest.approx(1.0) and stats["tis_weight_mean"] == pytest.approx(0.5)
    assert stats["bfloat16_logp_abs_diff_mean"] > 0 and stats["clip_fraction"] == 0.0
    norm = max(float(g.abs().max()) for g in uncapped_grads)
    assert norm > 0
    assert max(float((c - 0.5 * u).abs().max()) for c, u in zip(capped_grads, uncapped_grads)) <= 1e-6 * norm


def test_the_sampler_follows_the_adapter_and_a_stale_batch_is_refused(tiny):
    backend, batch, cfg, obj = rollout_batch(*tiny, "grpo", rollout_dtype="bfloat16")
    batch.advantages = torch.linspace(-1.0, 1.0, len(batch.sample_ids))
    batch.ref_logp = backend.logprobs(batch, temperature=0.8, reference=True)
    loss = _grpo_loss(cfg, obj)
    backend.forward_backward(batch, loss, temperature=0.8)
    backend.optimizer_step()
    with pytest.raises(IntegrityError, match="sampled by policy version 0, trained at 1"):
        backend.forward_backward(batch, loss, temperature=0.8)
    backend.zero_grad()
    trained = [p for p in backend.model.parameters() if p.requires_grad]
    with backend.rollout.weights(backend.policy_version):
        copies = [p.data for p in trained]
        assert all(c.dtype == torch.bfloat16 for c in copies)
    assert all(torch.equal(c, p.detach().to(torch.bfloat16)) for c, p in zip(copies, trained))
    backend.generate([batch.input_ids[0, :batch.prompt_width].tolist()], max_new_tokens=2, temperature=0.8)
    assert backend.rollout.sampled_version == backend.policy_version == 1


def test_a_grpo_run_samples_in_bfloat16_and_reports_the_mismatch(make_trainer, tmp_path):
    out = tmp_path / "run"
    done = make_trainer("grpo", out, steps=2, rollout_dtype="bfloat16").train()
    assert done["type"] == "completed" and done["step"] == 2
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for m in metrics:
        assert 0 < m["bfloat16_logp_abs_diff_mean"] <= m["bfloat16_logp_abs_diff_max"]
        assert 0 < m["tis_weight_mean"] <= 2.0
