"""Our GRPO against TRL's own code on the same batch (benchmarks/trl_grpo_parity.py, on a tiny random Llama): TRL
samples and scores a batch, and our advantages, reference log-probs, loss and gradient on those exact tensors must
equal TRL's. This is what makes `benchmarks/bench_grpo_vs_trl.py` a comparison of one algorithm: a different KL
estimator, aggregation, sign or advantage normalisation fails it."""
from __future__ import annotations

import pytest

from tests.helpers.benchmarks import load_benchmark


@pytest.fixture(scope="module")
def parity(tiny_model_dir):
    pytest.importorskip("trl")
    module = load_benchmark("trl_grpo_parity")
    trainer, out, rewards = module.trl_batch(str(tiny_model_dir), max_new_tokens=8, lora_r=4)
    return module, trainer, out, rewards


def test_sample_std_advantages_and_reference_log_probs_are_trls(parity):
    module, trainer, out, rewards = parity
    assert float(rewards.view(-1, 4).std(1).min()) > 0  # every group carries a signal
    got = module.compare_inputs(trainer, out, rewards)
    assert got["sample_std_advantage_max_difference"] < 1e-5
    assert got["population_std_advantage_max_difference"] > 1e-2  # n, not n - 1: the check discriminates
    assert got["reference_logp_max_difference"] < 1e-4


@pytest.mark.parametrize("zero_advantages", [False, True], ids=["policy-gradient", "kl-only"])
def test_grpo_loss_and_gradient_equal_trls_compute_loss(parity, zero_advantages):
    module, trainer, out, _ = parity
    got = module.compare_update(trainer, out, zero_advantages=zero_advantages)
    assert got["trl_loss"] != 0.0 and got["trl_grad_norm"] > 0
    assert got["our_loss"] == pytest.approx(got["trl_loss"], rel=1e-4)
    assert got["grad_relative_difference"] < 1e-4
    # another beta moves our gradient well past the tolerance: the comparison discriminates
    wrong = module.compare_update(trainer, out, zero_advantages=zero_advantages, ours={"beta": 0.08})
    assert wrong["grad_relative_difference"] > 1e-2


@pytest.mark.parametrize("objective", ["grpo", "dapo", "gspo", "cispo"])
def test_clipped_objectives_equal_trls_on_a_reused_batch(parity, objective):
    """Behaviour log-probs away from the live ones (a batch's later passes with mu > 1): the ratio leaves 1, each
    objective's clip (CISPO's weight cap) acts, and our loss and gradient still equal TRL's for the same loss."""
    module, trainer, out, _ = parity
    got = module.compare_update(trainer, out, objective=objective, off_policy=0.3)
    assert got["clip_fraction"] > 0.05 and got["trl_grad_norm"] > 0
    assert got["our_loss"] == pytest.approx(got["trl_loss"], rel=1e-4, abs=1e-7)
    assert got["grad_relative_difference"] < 1e-4
    # another clip range changes the gradient: the comparison sees the clip
    wrong = module.compare_update(trainer, out, objective=objective, off_policy=0.3,
                                  ours={"epsilon": 0.5} if objective == "grpo" else {"epsilon": 0.5, "epsilon_high": 0.5})
    assert wrong["grad_relative_difference"] > 1e-2
