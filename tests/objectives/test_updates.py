"""The new objectives on the tiny model (the ratio before the first update is checked for every objective in
tests/training/test_objectives.py): one update follows the advantages, the value loss falls, and a stopped run resumes to the same bytes."""
from __future__ import annotations

import threading

import pytest
import torch

from stateset_plugins.trainers.objectives import get_objective
from tests.helpers.objective_batches import rollout_batch
from tests.objectives.judge_server import JudgeServer

NEW = ("gepo", "vapo", "ppo", "rlaif", "cispo")


def prepared(backend, batch, cfg, obj, rewards):
    batch.rewards = torch.tensor(rewards)
    batch.advantages = obj.advantages(batch.rewards, batch.group_size, cfg)
    batch.ref_logp = backend.logprobs(batch, temperature=cfg.temperature, reference=True)
    obj.prepare(batch, backend, cfg)  # critics: values and GAE; a no-op otherwise
    return batch


def update(backend, batch, cfg, obj):
    critic = obj.value_head
    backend.forward_backward(batch, lambda new, b, *v: obj.loss(new, b, cfg, *v), temperature=cfg.temperature,
                             values=critic)
    backend.optimizer_step()


@pytest.mark.parametrize("algo", NEW)
def test_one_update_follows_the_advantages(tiny, algo):
    # VAPO: alpha 1 so lambda_policy = 1 - 1/len spreads credit over these 8-token completions; the paper's 0.05
    # gives lambda 0 below 20 tokens (one-step TD: only the last token sees the reward before the critic learns)
    backend, batch, cfg, obj = rollout_batch(*tiny, algo, **({"alpha": 1.0} if algo == "vapo" else {}))
    # +1/-1 so the critic objectives (V = 0 before training) get advantages of both signs too
    batch = prepared(backend, batch, cfg, obj, [1.0, -1.0, 1.0, -1.0, -1.0, 1.0, -1.0, 1.0])
    m = batch.completion_mask
    before = (backend.logprobs(batch, temperature=cfg.temperature) * m).sum(-1)
    update(backend, batch, cfg, obj)
    delta = (backend.logprobs(batch, temperature=cfg.temperature) * m).sum(-1) - before
    pos, neg = batch.advantages > 0, batch.advantages < 0
    assert pos.sum() == 4 and neg.sum() == 4
    assert (delta[pos] > 0).all() and (delta[neg] < 0).all(), (batch.advantages, delta)


@pytest.mark.parametrize("algo", ["ppo", "vapo"])
def test_value_loss_falls_on_a_fixed_batch(tiny, algo):
    backend, batch, cfg, obj = rollout_batch(*tiny, algo, value_learning_rate=1e-2)
    batch = prepared(backend, batch, cfg, obj, [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    losses = []
    for _ in range(8):
        stats = backend.forward_backward(batch, lambda new, b, v: obj.value_loss(v, b, cfg),
                                         temperature=cfg.temperature, values=True)
        backend.optimizer_step(policy=False)
        losses.append(stats["value_loss"])
    # PPO's clipped value loss cannot leave value_clip of the sampling-time values on a fixed batch: a floor
    assert losses[-1] < 0.75 * losses[0] and min(losses) < losses[0], losses


def test_vapo_value_pretraining_trains_the_critic_and_leaves_the_policy(make_trainer, tmp_path):
    trainer = make_trainer("vapo", tmp_path / "run", steps=1, value_pretrain_steps=4, value_learning_rate=1e-2)
    lora = {k: v.clone() for k, v in trainer.model.named_parameters() if v.requires_grad}
    engine = trainer.engine
    events = list(engine._pretrain_value())
    assert "value pre-training: 4 updates" in events[-1]["message"]
    assert all(torch.equal(v, dict(trainer.model.named_parameters())[k]) for k, v in lora.items())
    assert trainer.backend.value_head.weight.abs().sum() > 0 and engine.step == 0
    assert engine.cursor.state() == {"epoch": 0, "index": 0}  # the policy's prompt order is untouched
    assert trainer.backend.scheduler.last_epoch == 0
    records = trainer.engine.run_dir.read_metrics()
    assert [r["pretrain_step"] for r in records] == [1, 2, 3, 4] and records[0]["phase"] == "value_pretrain"
    # after pre-training the policy still samples what it scores: the ratio is 1
    batch, _ = engine._rl_batch()
    new = trainer.backend.logprobs(batch, temperature=trainer.config.temperature)
    m = batch.completion_mask > 0
    assert torch.exp(new[m] - batch.behaviour_logp[m]).sub(1).abs().max() < 1e-4


def _stop_after_first_update(trainer):
    stop = threading.Event()
    trainer.engine._stop = stop
    events = []
    for e in trainer.events():
        events.append(e)
        if e["type"] == "metrics" and e["step"] == 1:
            stop.set()
    return events


@pytest.mark.parametrize("algo", NEW)
def test_stop_then_resume_matches_an_uninterrupted_run(make_trainer, tmp_path, algo):
    extra = {"value_pretrain_steps": 2} if algo == "vapo" else {}
    with JudgeServer() as server:
        if algo == "rlaif":
            extra["judge_url"] = server.url
        full = make_trainer(algo, tmp_path / "full", steps=3, **extra)
        full.train()
        cut = make_trainer(algo, tmp_path / "cut", steps=3, **extra)
        events = _stop_after_first_update(cut)
        assert events[-1]["type"] == "failed" and events[-1]["reason"] == "interrupted"
        resumed = make_trainer(algo, tmp_path / "cut", steps=3, resume=True, **extra)
        resumed.train()
    a = (tmp_path / "full" / "adapter" / "adapter_model.safetensors").read_bytes()
    b = (tmp_path / "cut" / "adapter" / "adapter_model.safetensors").read_bytes()
    assert a == b
    if get_objective(algo).value_head:
        assert torch.equal(full.backend.value_head.weight, resumed.backend.value_head.weight)
    if algo == "rlaif":  # the resumed run re-read the verdicts of update 1 from the cache, never re-asking
        assert resumed.reward.calls < full.reward.calls
