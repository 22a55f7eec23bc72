"""Each objective: the loss equals a hand computation, the recorded behaviour log-probs are the sampling policy's
own (a rollout batch's first pass), and one update moves log-probs in the direction of the advantages (a sign
error fails here). Later passes over a batch, where the ratio leaves 1 and the clip acts: tests/objectives/
test_reuse.py."""
from __future__ import annotations

import math

import pytest
import torch

from stateset_agents.core.errors import InputError
from stateset_plugins.trainers.objectives import ALGORITHMS, get_objective
from stateset_plugins.trainers.objectives.dapo import overlong_penalty
from tests.helpers.objective_batches import clip_term, fixed_batch, k3, rollout_batch

RL = ("grpo", "gspo", "dapo", "multi_turn_grpo")
#: Every objective that samples (all but sft).
SAMPLING = tuple(a for a in ALGORITHMS if a != "sft")


@pytest.mark.parametrize("algo", ["grpo", "multi_turn_grpo"])
def test_grpo_loss_matches_hand_computation(algo):
    obj = get_objective(algo)
    cfg = obj.Config(beta=0.1, epsilon=0.05)
    b, new = fixed_batch()
    loss, stats = obj.loss(new, b, cfg)
    s0 = [clip_term(math.exp(-0.9 + 1.0), 1, .05, .05) + 0.1 * k3(-0.9, -1.2),
          clip_term(math.exp(-2.1 + 2.0), 1, .05, .05) + 0.1 * k3(-2.1, -1.9)]
    s1 = clip_term(math.exp(-0.3 + 0.5), -1, .05, .05) + 0.1 * k3(-0.3, -0.4)
    expected = (sum(s0) / 2 + s1) / 2  # per-sequence mean, then over sequences
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    # clipped: token 0 of sample a (r=1.105 > 1.05, A>0) and sample b (r=1.22, A<0: unclipped branch is lower)
    assert stats["clip_fraction"] == pytest.approx(1 / 3)


def test_dapo_loss_is_token_level_with_clip_higher():
    obj = get_objective("dapo")
    cfg = obj.Config(beta=0.0, epsilon=0.05, epsilon_high=0.2)
    b, new = fixed_batch(beta_ref=False)
    loss, _ = obj.loss(new, b, cfg)
    terms = [clip_term(math.exp(0.1), 1, .05, .2), clip_term(math.exp(-0.1), 1, .05, .2),
             clip_term(math.exp(0.2), -1, .05, .2)]
    assert float(loss) == pytest.approx(sum(terms) / 3, rel=1e-5)


def test_gspo_loss_uses_length_normalised_sequence_ratio():
    obj = get_objective("gspo")
    cfg = obj.Config(epsilon=0.01, epsilon_high=0.5)
    b, new = fixed_batch(beta_ref=False)
    loss, _ = obj.loss(new, b, cfg)
    s_a = math.exp(((-0.9 + 1.0) + (-2.1 + 2.0)) / 2)  # = 1
    s_b = math.exp(-0.3 + 0.5)
    expected = (clip_term(s_a, 1, .01, .5) + clip_term(s_b, -1, .01, .5)) / 2
    assert float(loss) == pytest.approx(expected, rel=1e-5)


def test_sft_loss_is_token_mean_nll():
    obj = get_objective("sft")
    b, new = fixed_batch(beta_ref=False)
    loss, _ = obj.loss(new, b, obj.Config())
    assert float(loss) == pytest.approx((0.9 + 2.1 + 0.3) / 3, rel=1e-6)


def test_dapo_overlong_shaping():
    cfg = get_objective("dapo").Config(max_new_tokens=20, overlong_buffer=10)
    pen = overlong_penalty(torch.tensor([5, 10, 15, 20, 20]), torch.tensor([False, False, False, False, True]), cfg)
    assert pen.tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0, -1.0])


def test_configs_reject_fields_their_objective_does_not_use():
    with pytest.raises(InputError, match="epsilon_high"):
        get_objective("grpo").Config.from_dict({"epsilon_high": 0.3})
    with pytest.raises(InputError, match="'beta'"):
        get_objective("sft").Config.from_dict({"beta": 0.1})
    with pytest.raises(InputError, match="max_turns"):
        get_objective("dapo").Config.from_dict({"max_turns": 3})
    assert get_objective("dapo").Config.from_dict({"epsilon_high": 0.3}).epsilon_high == 0.3
    assert get_objective("grpo").Config().beta > 0  # KL on by default for GRPO
    for algo in ALGORITHMS:  # shared names, documented defaults
        assert get_objective(algo).Config().learning_rate == 1e-4



@pytest.mark.parametrize("algo", SAMPLING)
def test_first_pass_scores_the_sampling_policy(tiny, algo):
    """The log-probs recorded at sampling equal the update's own before it steps (left padding included), so the
    importance ratio is a true pi_theta / pi_old once the weights move (`test_reuse`)."""
    backend, batch, cfg, _ = rollout_batch(*tiny, algo)
    new = backend.logprobs(batch, temperature=cfg.temperature)
    m = batch.completion_mask > 0
    assert (batch.attention_mask[:, :batch.prompt_width] == 0).any()  # left padding is exercised
    assert torch.exp(new[m] - batch.behaviour_logp[m]).sub(1).abs().max() < 1e-4


def test_shared_prompt_prefill_keeps_ratio_one_and_same_samples(tiny, monkeypatch):
    """The shared-prefill path (on for bigger models) must sample the same tokens with the same log-probs."""
    from stateset_plugins.models import backend as backend_module

    _, plain, cfg, _ = rollout_batch(*tiny, "grpo")
    monkeypatch.setitem(backend_module.SHARED_PREFILL_MIN_WORK, "cpu", 0)  # force it on for the tiny model
    used = []
    original = backend_module.LocalTorchBackend._shared_prefill
    monkeypatch.setattr(backend_module.LocalTorchBackend, "_shared_prefill",
                        lambda self, *a: used.append(original(self, *a)) or used[-1])
    backend, shared, _, _ = rollout_batch(*tiny, "grpo")
    assert used and used[0] is not None, "the shared prefill was not taken"
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    m = shared.completion_mask > 0
    assert (shared.behaviour_logp[m] - plain.behaviour_logp[m]).abs().max() < 1e-4
    new = backend.logprobs(shared, temperature=cfg.temperature)
    assert torch.exp(new[m] - shared.behaviour_logp[m]).sub(1).abs().max() < 1e-4


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_one_update_follows_the_advantages(tiny, algo):
    backend, batch, cfg, obj = rollout_batch(*tiny, "grpo" if algo == "sft" else algo)
    if algo == "sft":
        cfg = get_objective("sft").Config(learning_rate=1e-3)
        obj = get_objective("sft")
        temperature = 1.0
    else:
        temperature = cfg.temperature
    batch.rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    batch.advantages = obj.advantages(batch.rewards, 4, cfg) if algo != "sft" else batch.rewards * 0
    batch.ref_logp = backend.logprobs(batch, temperature=temperature, reference=True)
    m = batch.completion_mask
    before = (backend.logprobs(batch, temperature=temperature) * m).sum(-1)
    backend.forward_backward(batch, lambda new, b: obj.loss(new, b, cfg), temperature=temperature)
    backend.optimizer_step()
    after = (backend.logprobs(batch, temperature=temperature) * m).sum(-1)
    delta = after - before
    if algo == "sft":
        assert (delta > 0).all(), delta
    else:
        pos, neg = batch.advantages > 0, batch.advantages < 0
        assert (delta[pos] > 0).all() and (delta[neg] < 0).all(), (batch.advantages, delta)
