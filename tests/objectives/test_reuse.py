"""Rollout batches reused (`num_iterations` mu > 1, `minibatches`): the ratio against the behaviour log-probs leaves
1 after the first optimizer step and the clip acts. These replace the old "the ratio is 1" check, which held only
because every batch served one update; a sign error or a missing clip fails them (shown by mutating the loss)."""
from __future__ import annotations

import json
import math
import threading

import pytest
import torch

from stateset_agents.core.errors import InputError
from stateset_plugins.models.batch import Batch
from stateset_plugins.trainers.objectives import common, get_objective
from tests.helpers.objective_batches import rollout_batch

#: (ratio, advantage) per row, one token each; eps = 0.2 (DAPO/VAPO's clip-higher 0.28 keeps 1.5 outside too)
ROWS = [(1.5, 1.0), (0.5, -1.0), (1.1, 1.0), (0.9, -1.0), (0.5, 1.0), (1.5, -1.0)]
#: rows whose token the clip takes out of the gradient: the ratio left the range on the side the advantage favours
CLIPPED = [True, True, False, False, False, False]
#: the objectives whose clipped surrogate stops the gradient (CISPO clips a detached weight instead: see below)
#: (VAPO adds an NLL term on positive samples, which keeps a gradient on clipped tokens by design)
SURROGATE = ("grpo", "dapo", "gspo", "multi_turn_grpo", "ppo", "rlaif")


def _batch() -> tuple[Batch, torch.Tensor]:
    n = len(ROWS)
    old = torch.full((n, 1), -1.0)
    b = Batch(input_ids=torch.zeros((n, 2), dtype=torch.long), attention_mask=torch.ones((n, 2), dtype=torch.long),
              prompt_width=1, completion_mask=torch.ones((n, 1)), behaviour_logp=old.clone(),
              sample_ids=[f"s{i}" for i in range(n)], groups=["p"] * n, group_size=n)
    b.advantages = torch.tensor([a for _, a in ROWS])
    b.rewards = b.advantages.clone()
    b.ref_logp = old.clone()
    new = (old + torch.log(torch.tensor([[r] for r, _ in ROWS]))).requires_grad_(True)
    return b, new


def _config(algo):
    extra = {"judge_url": "http://127.0.0.1:9/v1"} if algo == "rlaif" else {}
    if algo == "gspo":  # GSPO's own range (3e-4, a sequence ratio) would clip every row here
        extra.update(epsilon=0.2, epsilon_high=0.28)
    return get_objective(algo).Config(beta=0.0, **extra)


def _token_grads(algo) -> tuple[torch.Tensor, dict]:
    obj, batch, (new) = get_objective(algo), *_batch()
    loss, stats = obj.loss(new, batch, _config(algo))
    (grad,) = torch.autograd.grad(loss, new)
    return grad.squeeze(-1), stats


@pytest.mark.parametrize("algo", SURROGATE)
def test_clip_stops_the_gradient_where_the_ratio_left_the_range(algo):
    grad, stats = _token_grads(algo)
    for g, clipped, (r, a) in zip(grad.tolist(), CLIPPED, ROWS):
        if clipped:
            assert g == 0.0, (algo, r, a, g)
        else:
            assert abs(g) > 1e-6, (algo, r, a, g)
            # the surviving gradient pushes log pi in the advantage's direction (loss falls as a*r rises)
            assert math.copysign(1, -g) == math.copysign(1, a), (algo, r, a, g)
    assert stats["clip_fraction"] == pytest.approx(sum(CLIPPED) / len(ROWS))


def test_cispo_caps_the_weight_but_keeps_every_token_gradient():
    grad, stats = _token_grads("cispo")
    cfg = _config("cispo")
    n = len(ROWS)
    for g, (r, a) in zip(grad.tolist(), ROWS):
        weight = min(max(r, 1 - cfg.epsilon), 1 + cfg.epsilon_high)
        assert g == pytest.approx(-weight * a / n, rel=1e-5)
    assert stats["clip_fraction"] == pytest.approx(2 / n)  # the two rows at ratio 1.5


@pytest.mark.parametrize("mutation", ["no_clip", "sign_error", "wrong_branch"])
def test_a_broken_clip_fails_the_clip_test(monkeypatch, mutation):
    """The test above catches each of these mutations of the shared clipped surrogate."""
    def broken(ratio, adv, low, high):
        if mutation == "no_clip":
            return -(ratio * adv), torch.zeros_like(ratio, dtype=torch.bool)
        if mutation == "sign_error":
            clipped = torch.clamp(ratio, 1 - low, 1 + high) * adv
            return torch.minimum(ratio * adv, clipped), clipped < ratio * adv
        clipped = torch.clamp(ratio, 1 - low, 1 + high) * adv  # max instead of min: the optimistic branch
        return -torch.maximum(ratio * adv, clipped), clipped > ratio * adv

    monkeypatch.setattr(common, "clipped_surrogate", broken)
    with pytest.raises(AssertionError):
        test_clip_stops_the_gradient_where_the_ratio_left_the_range("grpo")


#: (GEPO is left out: its group-expectation weight differs from 1 even on-policy, so its first pass can clip)
@pytest.mark.parametrize("algo", ("grpo", "gspo", "cispo", "dapo", "ppo", "vapo"))
def test_second_pass_over_a_rollout_batch_moves_the_ratio_and_clips(tiny, algo):
    """Two optimizer steps on one real rollout batch: the first sees ratio 1 (nothing clipped, the behaviour
    log-probs are the policy's own), the second a ratio that moved, with the clip acting on some tokens."""
    backend, batch, cfg, obj = rollout_batch(*tiny, algo, learning_rate=0.3, beta=0.0)
    batch.rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    batch.advantages = obj.advantages(batch.rewards, 4, cfg)
    batch.ref_logp = backend.logprobs(batch, temperature=cfg.temperature, reference=True)
    obj.prepare(batch, backend, cfg)
    from stateset_plugins.trainers.engine import _with_ratio_stats

    seen = []
    for _ in range(2):
        stats = backend.forward_backward(
            batch, lambda new, b, *v: _with_ratio_stats(obj, obj.loss(new, b, cfg, *v), new, b),
            temperature=cfg.temperature, values=obj.value_head)
        backend.optimizer_step()
        seen.append(stats)
    first, second = seen
    assert first["clip_fraction"] == 0.0 and first["approx_kl"] < 1e-6
    assert abs(first["ratio_max"] - 1) < 1e-3 and abs(first["ratio_min"] - 1) < 1e-3
    assert second["approx_kl"] > 1e-4
    assert second["clip_fraction"] > 0, second


# --------------------------------------------------------------------------------------------------- the engine
def _metrics(path):
    return [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]


def test_engine_serves_mu_passes_of_minibatches_per_rollout_batch(make_trainer, tmp_path):
    out = tmp_path / "run"
    make_trainer("grpo", out, steps=8, num_iterations=2, minibatches=2, batch_size=2, learning_rate=0.1,
                 save_every=4, beta=0.0).train()
    rows = [r for r in _metrics(out) if r.get("phase") != "value_pretrain"]
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert [(r["iteration"], r["minibatch"]) for r in rows] == [(0, 0), (0, 1), (1, 0), (1, 1)] * 2
    assert all(r["rows"] == 4 for r in rows)  # one group of num_generations 4 per minibatch
    # the rollout's own figures appear once per rollout batch, on its first optimizer step
    assert ["reward_mean" in r for r in rows] == [True, False, False, False] * 2
    assert all("approx_kl" in r and "clip_fraction" in r for r in rows)
    # only a batch's first step sees the policy that sampled it; every later one (the next minibatch included)
    # sees weights that moved since
    assert [r["approx_kl"] < 1e-6 for r in rows] == [True, False, False, False] * 2, [r["approx_kl"] for r in rows]
    receipts = [json.loads(x) for x in (out / "receipts.jsonl").read_text().splitlines()]
    assert [r["step"] for r in receipts] == list(range(1, 9)) and all(r["committed"] for r in receipts)
    assert len({r["update_sha256"] for r in receipts}) == 8  # every optimizer step changed the adapter
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-000004", "step-000008"]


def test_a_stop_inside_a_rollout_batch_saves_at_its_end_and_resumes_exactly(make_trainer, tmp_path):
    cfg = {"steps": 6, "num_iterations": 3, "save_every": 3, "learning_rate": 0.05}
    make_trainer("grpo", tmp_path / "full", **cfg).train()
    stop = threading.Event()
    trainer = make_trainer("grpo", tmp_path / "cut", **cfg)
    trainer.engine._stop = stop
    events = []
    for e in trainer.events():
        events.append(e)
        if e["type"] == "metrics" and e["step"] == 1:
            stop.set()  # mid-batch: the batch's remaining passes run, then the checkpoint at its end
    assert events[-1]["type"] == "failed" and events[-1]["reason"] == "interrupted"
    assert sorted(p.name for p in (tmp_path / "cut" / "checkpoints").iterdir()) == ["step-000003"]
    make_trainer("grpo", tmp_path / "cut", resume=True, **cfg).train()
    a = (tmp_path / "full" / "adapter" / "adapter_model.safetensors").read_bytes()
    b = (tmp_path / "cut" / "adapter" / "adapter_model.safetensors").read_bytes()
    assert a == b
    assert [r["step"] for r in _metrics(tmp_path / "cut")] == [1, 2, 3, 4, 5, 6]


def test_update_rows_chunking_gives_the_same_reuse(make_trainer, tmp_path):
    cfg = {"steps": 2, "num_iterations": 2, "save_every": 2, "learning_rate": 0.05}
    make_trainer("grpo", tmp_path / "whole", **cfg).train()
    make_trainer("grpo", tmp_path / "rows", update_rows=3, **cfg).train()
    a, b = _metrics(tmp_path / "whole"), _metrics(tmp_path / "rows")
    for x, y in zip(a, b):
        assert x["loss"] == pytest.approx(y["loss"], abs=1e-5)
        assert x["approx_kl"] == pytest.approx(y["approx_kl"], abs=1e-6)
        assert x["clip_fraction"] == pytest.approx(y["clip_fraction"], abs=1e-6)


@pytest.mark.parametrize("values, field", [
    ({"steps": 5, "num_iterations": 2, "save_every": 2}, "steps"),
    ({"steps": 4, "num_iterations": 2, "save_every": 3}, "save_every"),
    ({"num_iterations": 0}, "num_iterations"),
    ({"minibatches": 5, "batch_size": 4}, "minibatches"),
    ({"steps": 4, "save_every": 2, "num_iterations": 2, "rollout_engine": "vllm"}, "num_iterations"),
])
def test_configs_that_would_split_a_rollout_batch_are_refused(values, field):
    with pytest.raises(InputError) as err:
        get_objective("grpo").Config(**values)
    assert err.value.field == field


def test_nproc_refuses_reuse_for_now():
    from stateset_plugins.trainers.distributed import check_supported

    obj = get_objective("grpo")
    with pytest.raises(InputError, match="--nproc 1"):
        check_supported(obj, obj.Config(steps=4, save_every=2, num_iterations=2), 2)
