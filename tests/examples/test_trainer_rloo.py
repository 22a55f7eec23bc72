"""examples/stateset-trainer-rloo: a third party's objective (RLOO), installed with pip, trained by `train
--algorithm rloo` on the shared engine with no kernel edit."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from stateset_agents.cli import main

from .conftest import installed


def test_the_leave_one_out_advantage():
    """A_i = r_i - mean of the other rewards of its group; each group's advantages sum to zero."""
    torch = pytest.importorskip("torch")
    from stateset_trainer_rloo.objective import RLOO, RLOOConfig

    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.2, 0.4, 0.6, 0.8])
    got = RLOO().advantages(rewards, 4, RLOOConfig())
    groups = rewards.view(2, 4).tolist()
    want = [r - (sum(g) - r) / 3 for g in groups for r in g]
    assert got.tolist() == pytest.approx(want)
    assert got.view(2, 4).sum(dim=1).tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_the_loss_is_reinforce_over_whole_completions():
    """d L / d log pi(o_i,t) = -A_i / N on every sampled token (the completion is one action), 0 elsewhere."""
    torch = pytest.importorskip("torch")
    from stateset_trainer_rloo.objective import RLOO, RLOOConfig

    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    new_logp = torch.tensor([[-1.0, -2.0, float("nan")], [-0.5, float("nan"), float("nan")]], requires_grad=True)
    batch = SimpleNamespace(completion_mask=mask, advantages=torch.tensor([0.5, -1.0]), ref_logp=None)
    loss, stats = RLOO().loss(new_logp, batch, RLOOConfig())
    assert float(loss) == pytest.approx(-(0.5 * -3.0 + -1.0 * -0.5) / 2)
    loss.backward()
    assert new_logp.grad.tolist() == [[-0.25, -0.25, 0.0], [0.5, 0.0, 0.0]]
    with pytest.raises(ValueError, match="reference"):  # a KL term needs the reference's log-probs
        RLOO().loss(new_logp, batch, RLOOConfig(beta=0.1))


def test_train_a_few_steps_on_the_tiny_model(tiny_model_dir, curated, held_out, tmp_path, capsys):
    installed("trainer:rloo", "stateset-trainer-rloo")
    out = tmp_path / "run"
    argv = ["train", "--dataset", str(curated), "--algorithm", "rloo", "--reward", "gsm8k", "--base-model",
            str(tiny_model_dir), "--eval-prompts", str(held_out), "--output", str(out), "--steps", "2", "--seed", "0"]
    assert main(argv) == 0, capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["algorithm"] == "rloo" and manifest["committed_updates"] == 2
    assert (out / "adapter" / "adapter_model.safetensors").exists()
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps if "loss" in s][-1] == 2


def test_the_python_face_comes_from_the_registry():
    from stateset_agents.training.rloo_trainer import RLOOConfig, RLOOTrainer, train_with_rloo

    from stateset_trainer_rloo.objective import RLOOConfig as own

    assert RLOOConfig is own and RLOOConfig().beta == 0.0
    assert callable(train_with_rloo) and RLOOTrainer.__name__ == "RLOOTrainer"
