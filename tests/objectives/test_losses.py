"""Hand computations on fixed numbers: each new objective's loss, GAE, the length-adaptive lambda, GEPO's weight
under stale behaviour log-probs, and config validation."""
from __future__ import annotations

import math

import pytest
import torch

from stateset_agents.core.errors import InputError
from stateset_plugins.models.batch import Batch
from stateset_plugins.trainers.objectives import get_objective
from stateset_plugins.trainers.objectives.common import gae, group_expectation_log_weight
from stateset_plugins.trainers.objectives.vapo import policy_lambda
from tests.helpers.objective_batches import JUDGE, clip_term, fixed_batch, k3

NEW = ("gepo", "vapo", "ppo", "rlaif", "cispo")


def config(algo, **values):
    return get_objective(algo).Config(**({**JUDGE, **values} if algo == "rlaif" else values))


def with_critic(b):
    """Token advantages, returns and sampling-time values for the critic objectives' hand computations."""
    b.token_advantages = torch.tensor([[0.5, 1.5], [-2.0, 0.0]])
    b.returns = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    b.old_values = torch.tensor([[0.2, 0.9], [0.3, 0.0]])
    return b, torch.tensor([[0.5, 0.8], [0.15, 0.0]])  # new values


def test_cispo_loss_is_detached_clipped_weight_times_log_likelihood():
    cfg = config("cispo", beta=0.1, epsilon=1.0, epsilon_high=0.1)
    b, new = fixed_batch()
    new.requires_grad_(True)
    loss, stats = get_objective("cispo").loss(new, b, cfg)
    loss_value = float(loss.detach())
    w = [min(math.exp(0.1), 1.1), math.exp(-0.1), min(math.exp(0.2), 1.1)]  # clipped above at 1.1 only
    terms = [-w[0] * 1 * -0.9 + 0.1 * k3(-0.9, -1.2), -w[1] * 1 * -2.1 + 0.1 * k3(-2.1, -1.9),
             -w[2] * -1 * -0.3 + 0.1 * k3(-0.3, -0.4)]
    assert loss_value == pytest.approx(sum(terms) / 3, rel=1e-5)
    assert stats["clip_fraction"] == pytest.approx(2 / 3)
    loss.backward()  # every token keeps a gradient, clipped or not: d/dlogp of the policy term is -w A / 3
    kl_grad = [0.1 * (1 - math.exp(r - n)) / 3 for n, r in ((-0.9, -1.2), (-2.1, -1.9), (-0.3, -0.4))]
    expected = [-w[0] / 3 + kl_grad[0], -w[1] / 3 + kl_grad[1], w[2] / 3 + kl_grad[2]]
    got = [new.grad[0, 0], new.grad[0, 1], new.grad[1, 0]]
    assert [float(g) for g in got] == pytest.approx(expected, rel=1e-5)


def test_gepo_loss_uses_the_group_expectation_weight():
    cfg = config("gepo", epsilon=0.5)
    b, new = fixed_batch()
    q = [math.exp((-1.0 - 2.0) / 2), math.exp(-0.5)]  # length-normalised behaviour probabilities
    e_q = sum(x * x for x in q) / sum(q)
    w = [math.exp((-0.9 - 2.1) / 2) / e_q, math.exp(-0.3) / e_q]
    log_w = group_expectation_log_weight(new, torch.nan_to_num(b.behaviour_logp), b.completion_mask, 2)
    assert log_w.tolist() == pytest.approx([math.log(x) for x in w], rel=1e-5)
    loss, _ = get_objective("gepo").loss(new, b, cfg)
    assert float(loss) == pytest.approx((clip_term(w[0], 1, .5, .5) + clip_term(w[1], -1, .5, .5)) / 2, rel=1e-5)


def test_gepo_weights_stay_finite_and_bounded_under_stale_behaviour_logprobs():
    torch.manual_seed(0)
    g, width = 4, 64
    new = -torch.rand(2 * g, width) * 0.5  # the current policy: confident
    stale = new - 3.0 - torch.rand(2 * g, width) * 4  # a sampler many versions behind: e^3..e^7 per token
    mask = torch.ones(2 * g, width)
    token_ratio_product = torch.exp((new - stale).sum(-1))
    assert torch.isinf(token_ratio_product).all()  # what a per-sequence token-ratio product would do
    log_w = group_expectation_log_weight(new, stale, mask, g)
    assert torch.isfinite(log_w).all()
    q_min = stale.mean(-1).view(-1, g).min(dim=1).values.repeat_interleave(g)
    assert (log_w <= -q_min + 1e-5).all()  # w <= 1 / min_j q_j, the bound in the docstring
    b, _ = fixed_batch()
    b = Batch(input_ids=torch.zeros((2 * g, width + 1), dtype=torch.long),
              attention_mask=torch.ones((2 * g, width + 1), dtype=torch.long), prompt_width=1,
              completion_mask=mask, behaviour_logp=stale, sample_ids=[f"s{i}" for i in range(2 * g)],
              groups=["a"] * g + ["b"] * g, group_size=g)
    b.advantages = torch.tensor([1.0, -1.0] * g)
    new.requires_grad_(True)
    loss, _ = get_objective("gepo").loss(new, b, config("gepo"))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(new.grad).all()


def test_ppo_loss_clipped_policy_and_value_terms():
    cfg = config("ppo", epsilon=0.05, value_clip=0.2, kl_mode="loss", beta=0.1)
    b, new = fixed_batch()
    b, values = with_critic(b)
    loss, stats = get_objective("ppo").loss(new, b, cfg, values)
    pol = [clip_term(math.exp(0.1), 0.5, .05, .05) + 0.1 * k3(-0.9, -1.2),
           clip_term(math.exp(-0.1), 1.5, .05, .05) + 0.1 * k3(-2.1, -1.9),
           clip_term(math.exp(0.2), -2.0, .05, .05) + 0.1 * k3(-0.3, -0.4)]

    def vterm(v, old, ret):
        clipped = old + min(max(v - old, -0.2), 0.2)
        return 0.5 * max((v - ret) ** 2, (clipped - ret) ** 2)

    val = [vterm(0.5, 0.2, 1.0), vterm(0.8, 0.9, 1.0), vterm(0.15, 0.3, 0.0)]
    assert float(loss) == pytest.approx(sum(pol) / 3 + sum(val) / 3, rel=1e-5)
    assert stats["value_loss"] == pytest.approx(sum(val) / 3, rel=1e-5)
    assert stats["value_clip_fraction"] == pytest.approx(1 / 3)  # token 0: 0.5 - 0.2 > 0.2


def test_vapo_loss_clip_higher_token_level_positive_nll_and_value():
    cfg = config("vapo", epsilon=0.05, epsilon_high=0.15, nll_coef=0.1, nll_threshold=1.0)
    b, new = fixed_batch()
    b, values = with_critic(b)
    loss, stats = get_objective("vapo").loss(new, b, cfg, values)
    pol = [clip_term(math.exp(0.1), 0.5, .05, .15), clip_term(math.exp(-0.1), 1.5, .05, .15),
           clip_term(math.exp(0.2), -2.0, .05, .15)]
    nll = (0.9 + 2.1) / 2  # only sample a (reward 1.0) is positive
    val = 0.5 * ((0.5 - 1.0) ** 2 + (0.8 - 1.0) ** 2 + (0.15 - 0.0) ** 2) / 3
    assert stats["nll"] == pytest.approx(nll, rel=1e-6)
    assert float(loss) == pytest.approx(sum(pol) / 3 + 0.1 * nll + val, rel=1e-5)


def test_rlaif_loss_is_grpos():
    b, new = fixed_batch()
    a, _ = get_objective("rlaif").loss(new, b, config("rlaif", beta=0.1, epsilon=0.05))
    g, _ = get_objective("grpo").loss(new, b, get_objective("grpo").Config(beta=0.1, epsilon=0.05))
    assert float(a) == float(g)


def test_gae_matches_a_hand_computed_example():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 2.0]])
    values = torch.tensor([[0.5, 0.2, 0.4], [0.3, 9.0, 0.1]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]])  # row 2: an environment token in the middle
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    # row 1: delta = [0 + .2 - .5, 0 + .4 - .2, 1 - .4] = [-.3, .2, .6]; A_2 = .6, A_1 = .2 + .5 * .6 = .5,
    # A_0 = -.3 + .5 * .5 = -.05. Row 2 skips t=1: delta_2 = 2 - .1 = 1.9, A_0 = (0 + .1 - .3) + .5 * 1.9 = .75
    assert adv.tolist() == [pytest.approx([-0.05, 0.5, 0.6]), pytest.approx([0.75, 0.0, 1.9])]
    assert ret.tolist() == [pytest.approx([0.45, 0.7, 1.0]), pytest.approx([1.05, 0.0, 2.0])]
    # lambda 1 (VAPO's critic): returns are the Monte Carlo return, whatever the values
    _, mc = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    assert mc.tolist() == [pytest.approx([1.0, 1.0, 1.0]), pytest.approx([2.0, 0.0, 2.0])]
    # per-row lambda and a discount: row 1 lambda 0 (one-step TD), row 2 lambda 1
    adv, _ = gae(rewards, values, mask, gamma=0.9, lam=torch.tensor([0.0, 1.0]))
    assert adv[0].tolist() == pytest.approx([0.9 * 0.2 - 0.5, 0.9 * 0.4 - 0.2, 0.6])
    assert adv[1, 0].item() == pytest.approx(0.9 * 2.0 - 0.3)


def test_vapo_length_adaptive_lambda():
    assert policy_lambda(torch.tensor([40, 100, 10, 0]), 0.05).tolist() == pytest.approx([0.5, 0.8, 0.0, 0.0])


def test_ppo_kl_in_reward_is_a_per_token_penalty():
    from stateset_plugins.trainers.objectives.ppo import token_rewards

    b, _ = fixed_batch()
    r = token_rewards(b, config("ppo", beta=0.5, kl_mode="reward"))
    # k1 = log pi_old - log pi_ref per token; the reward sits on each row's last sampled token
    assert r.tolist() == [pytest.approx([-0.5 * (-1.0 + 1.2), 1.0 - 0.5 * (-2.0 + 1.9)]),
                          pytest.approx([0.0 - 0.5 * (-0.5 + 0.4), 0.0])]
    assert token_rewards(b, config("ppo", beta=0.5, kl_mode="loss"))[0, 0] == 0.0


@pytest.mark.parametrize("algo, field", [("gepo", "epsilon_high"), ("vapo", "kl_mode"), ("ppo", "alpha"),
                                         ("rlaif", "value_clip"), ("cispo", "nll_coef"), ("ppo", "scale_rewards"),
                                         ("vapo", "scale_rewards"), ("grpo", "judge_url")])
def test_a_field_the_objective_does_not_use_is_refused(algo, field):
    with pytest.raises(InputError, match=f"the {algo} objective does not use '{field}'"):
        get_objective(algo).Config.from_dict({field: 1, **(JUDGE if algo == "rlaif" else {})})


def test_config_values_are_validated_and_defaults_documented():
    with pytest.raises(InputError, match="kl_mode"):
        config("ppo", kl_mode="both")
    with pytest.raises(InputError, match="needs a judge"):
        get_objective("rlaif").Config().require_judge()
    with pytest.raises(InputError, match="exactly one judge"):
        config("rlaif", judge_model="x")
    assert config("cispo").epsilon == 1.0 and config("cispo").epsilon_high == 0.28  # eps_low "large"
    v = config("vapo")
    assert (v.lam, v.alpha, v.epsilon, v.epsilon_high, v.nll_coef, v.beta) == (1.0, 0.05, 0.2, 0.28, 0.1, 0.0)
    p = config("ppo")
    assert (p.lam, p.gamma, p.kl_mode, p.value_clip) == (0.95, 1.0, "reward", 0.2)
    for algo in NEW:
        assert config(algo).learning_rate == 1e-4 and config(algo).num_generations == 4
