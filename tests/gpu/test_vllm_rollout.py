"""The vLLM rollout adapter, on CPU: conversion of recorded vLLM outputs, TIS weights by hand, the integrity rules,
the LoRA swap bookkeeping, the missing-vLLM error, and a short GRPO run through a stand-in vLLM engine."""
from __future__ import annotations

import copy
import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from stateset_agents.core.errors import ComponentUnavailable
from stateset_plugins.models.backend import LocalTorchBackend
from stateset_plugins.models.batch import Generation, IntegrityError, Sample, collate
from stateset_plugins.models.importance import apply_tis, tis_weights
from stateset_plugins.models.vllm_rollout import AdapterVersions, to_generations
from stateset_plugins.trainers.objectives.common import policy_loss

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"


def load(name):
    doc = json.loads((FIXTURES / name).read_text())
    return doc["request_outputs"], set(doc["eos_ids"]), doc["max_new_tokens"]


EXPECTED = [
    Generation([17, 23, 2], [-0.510826, -2.302585, -0.105361], truncated=False),
    Generation([8, 8, 30, 12, 7], [-1.203973, -0.356675, -3.506558, -0.051293, -4.60517], truncated=True),
    Generation([2], [-0.693147], truncated=False),
    Generation([44, 2], [-1.609438, -0.000123], truncated=False),
]


def as_objects(records):
    """The records as vLLM-like objects: attributes, int token-id keys, Logprob objects."""
    def completion(c):
        positions = [{int(k): SimpleNamespace(**v) for k, v in p.items()} for p in c["logprobs"]]
        return SimpleNamespace(**{**c, "logprobs": positions})

    return [SimpleNamespace(**{**r, "outputs": [completion(c) for c in r["outputs"]]}) for r in records]


def test_records_convert_to_generations_exactly():
    records, eos, width = load("request_outputs.json")
    assert to_generations(records, eos, width) == EXPECTED


def test_vllm_objects_convert_the_same_way():
    records, eos, width = load("request_outputs.json")
    assert to_generations(as_objects(records), eos, width) == EXPECTED


def test_missing_logprob_of_a_sampled_token_is_an_integrity_failure():
    records, eos, width = load("missing_logprob.json")
    with pytest.raises(IntegrityError, match="no log-prob for the sampled token 23 at position 1") as info:
        to_generations(records, eos, width)
    assert info.value.sample == "vllm request 7 output 0"
    assert "never invented" in info.value.problem


def _broken(change):
    records, eos, width = load("request_outputs.json")
    c = records[0]["outputs"][0]
    change(c)
    return records, eos, width


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(logprobs=None), "no log-probs"),
    (lambda c: c["logprobs"].pop(), "2 log-prob positions for 3 tokens"),
    (lambda c: c.update(token_ids=[17, 23, 9]), "no log-prob for the sampled token 9"),
    (lambda c: c.update(finish_reason="length"), "finished 'length' with an end-of-sequence token at 2"),
    (lambda c: c.update(finish_reason=None), "unfinished"),
    (lambda c: c.update(cumulative_logprob=-1.0), "cumulative_logprob"),
    (lambda c: c["logprobs"][0]["17"].update(logprob=0.5), "not a finite non-positive number"),
    (lambda c: c["logprobs"][0]["17"].update(logprob=float("nan")), "not a finite non-positive number"),
    (lambda c: c.pop("token_ids"), "not a vLLM RequestOutput"),
])
def test_inconsistent_records_are_refused(change, message):
    records, eos, width = _broken(change)
    with pytest.raises(IntegrityError, match=message):
        to_generations(records, eos, width)


def test_stop_without_an_end_token_and_overlong_outputs_are_refused():
    records, _eos, width = load("request_outputs.json")
    with pytest.raises(IntegrityError, match="finished 'stop' but end-of-sequence tokens sit at"):
        to_generations(records[:1], {99}, width)  # a stop the engine did not ask for (a stop string, another EOS)
    with pytest.raises(IntegrityError, match="5 sampled tokens, expected 1 to 4"):
        to_generations(records[1:2], {2}, 4)


# ------------------------------------------------------------------------------------------------ TIS
def test_tis_weights_by_hand():
    trainer = torch.tensor([[-1.0, -2.0, -0.5, -7.0]])
    vllm = torch.tensor([[-1.2, -1.0, -3.0, math.nan]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    weight, stats = tis_weights(trainer, vllm, mask, 2.0)
    # exp(0.2) = 1.2214, exp(-1) = 0.3679, exp(2.5) = 12.18 -> capped at 2; off the mask: 0
    assert torch.allclose(weight, torch.tensor([[math.exp(0.2), math.exp(-1.0), 2.0, 0.0]]))
    assert stats["vllm_logp_abs_diff_mean"] == pytest.approx((0.2 + 1.0 + 2.5) / 3, abs=1e-6)
    assert stats["vllm_logp_abs_diff_max"] == pytest.approx(2.5, abs=1e-6)
    assert stats["tis_clip_fraction"] == pytest.approx(1 / 3)
    assert stats["tis_weight_mean"] == pytest.approx((math.exp(0.2) + math.exp(-1.0) + 2.0) / 3, abs=1e-6)
    uncapped, stats = tis_weights(trainer, vllm, mask, None)
    assert torch.equal(uncapped, mask) and stats["tis_clip_fraction"] == 0.0


def _batch(trainer_rows, vllm_rows, advantages):
    samples = [Sample(f"s{i}", "g", [1, 2], [5] * len(v), [True] * len(v), v) for i, v in enumerate(vllm_rows)]
    batch = collate(samples, 0, len(samples))
    batch.advantages = torch.tensor(advantages)
    width = batch.completion_width
    new = torch.tensor([row + [0.0] * (width - len(row)) for row in trainer_rows], requires_grad=True)
    return batch, new


def test_tis_weights_scale_each_tokens_gradient_and_the_ratio_uses_the_trainers_logprobs():
    trainer = [[-1.0, -2.0, -0.5], [-0.3]]
    vllm = [[-1.2, -1.0, -3.0], [-0.1]]
    batch, leaf = _batch(trainer, vllm, [1.5, -0.5])
    new = leaf * 1.0
    corrected, stats = apply_tis(new, batch, 2.0)
    assert torch.equal(corrected.behaviour_logp[0], torch.tensor([-1.0, -2.0, -0.5]))
    assert math.isnan(corrected.behaviour_logp[1, 1])
    loss, loss_stats = policy_loss(new, corrected, 0.0, 0.2, 0.2, token_level=False)
    loss.backward()
    assert loss_stats["clip_fraction"] == 0.0  # the ratio is 1: same weights as the sampling policy
    # GRPO, sequence mean then batch mean, ratio 1: d loss / d logp_t = -A_i * w_t / |o_i| / N
    w = [[math.exp(0.2), math.exp(-1.0), 2.0], [math.exp(-0.2)]]
    want = torch.tensor([[-1.5 * x / 3 / 2 for x in w[0]], [0.5 * w[1][0] / 1 / 2, 0.0, 0.0]])
    assert torch.allclose(leaf.grad, want, atol=1e-6)
    assert stats["tis_clip_fraction"] == pytest.approx(1 / 4)


# ------------------------------------------------------------------------------------------ adapter swap
def test_each_policy_version_gets_a_new_lora_id_and_path(tmp_path):
    saved = []

    def save(path):
        path.mkdir(parents=True)
        (path / "adapter_model.safetensors").write_text(str(len(saved)))
        saved.append(path.name)

    def make_request(**kw):
        return SimpleNamespace(**kw)

    versions = AdapterVersions(tmp_path, save, make_request)
    first, retired = versions.request(0)
    assert (first.lora_name, first.lora_int_id, first.lora_path) == ("policy-v0", 1, str(tmp_path / "policy-v0"))
    assert retired is None
    again, retired = versions.request(0)
    assert again is first and retired is None and saved == ["policy-v0"]  # same version: no save, same id
    second, retired = versions.request(1)
    assert (second.lora_int_id, second.lora_path) == (2, str(tmp_path / "policy-v1")) and retired is first
    assert not (tmp_path / "policy-v0").exists() and (tmp_path / "policy-v1").exists()
    third, _ = versions.request(5)  # a loaded checkpoint jumps versions: still a fresh id
    assert third.lora_int_id == 6 and saved == ["policy-v0", "policy-v1", "policy-v5"]
    with pytest.raises(ValueError, match="went back"):
        versions.request(4)


# --------------------------------------------------------------------------------------------- missing vLLM
def _vllm_config(**more):
    from stateset_plugins.trainers.objectives.grpo import GRPOConfig

    fields = {"rollout_engine": "vllm", "device": "cpu", "max_new_tokens": 6, "batch_size": 2,
              "num_generations": 4, "learning_rate": 2e-2, **more}
    return GRPOConfig(**fields)


def test_missing_vllm_names_the_install_command(monkeypatch, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(ComponentUnavailable, match=r"pip install 'stateset-agents\[vllm\]'"):
        LocalTorchBackend(model, tokenizer, _vllm_config())
    assert not hasattr(model, "peft_config")  # refused before the model was wrapped
    LocalTorchBackend(model, tokenizer, _vllm_config(rollout_engine="transformers"))  # never imports vllm


def test_vllm_without_processed_logprobs_is_refused(monkeypatch):
    from stateset_plugins.models.vllm_rollout import import_vllm
    from tests.gpu import fake_vllm

    fake_vllm.install(monkeypatch, version="0.9.2")
    with pytest.raises(ComponentUnavailable, match="found 0.9.2"):
        import_vllm()


# ---------------------------------------------------------------------------- a run through the stand-in
def test_grpo_through_the_vllm_adapter_swaps_the_adapter_each_update(fake_vllm, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stateset_agents.plugin_api.datasets import load_dataset
    from stateset_plugins.models.rendering import ChatRenderer
    from stateset_plugins.trainers.engine import Engine
    from stateset_plugins.trainers.objectives import get_objective
    from tests.helpers.toy_rewards import DigitReward, make_rows

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    cfg = _vllm_config(steps=3, vllm_engine_args={"enforce_eager": True})
    backend = LocalTorchBackend(model, tokenizer, cfg)
    engine = Engine(backend, ChatRenderer(tokenizer, cfg.max_prompt_tokens), get_objective("grpo"), cfg,
                    load_dataset(make_rows()), DigitReward())
    metrics = [e["metrics"] for e in engine.run() if e["type"] == "metrics"]
    assert engine.failure is None and len(metrics) == 3

    (llm,) = fake_vllm.LLM.instances
    assert llm.kwargs["logprobs_mode"] == "processed_logprobs" and llm.kwargs["enable_lora"] is True
    assert llm.kwargs["enforce_eager"] is True and llm.kwargs["model"] == str(tiny_model_dir)
    assert [lora.lora_int_id for _n, lora, _p in llm.calls] == [1, 2, 3]  # one new id per policy version
    assert llm.llm_engine.removed == [1, 2]
    params = llm.calls[0][2].kwargs
    assert params["logprobs"] == 1 and params["temperature"] == cfg.temperature and params["top_p"] == 1.0
    assert params["stop_token_ids"] == sorted(backend.eos_ids) and params["max_tokens"] == cfg.max_new_tokens
    for m in metrics:
        assert m["grad_norm"] > 0
        # the stand-in sampled with the adapter it was handed: a stale one would not match the trainer
        assert m["vllm_logp_abs_diff_max"] < 1e-4 and m["tis_clip_fraction"] == 0.0
        assert m["tis_weight_mean"] == pytest.approx(1.0, abs=1e-4)


def test_a_stale_adapter_shows_up_as_mismatch_and_a_moved_policy_is_refused(fake_vllm, tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    backend = LocalTorchBackend(model, tokenizer, _vllm_config())
    prompt = tokenizer("hello how can I help")["input_ids"]
    gens = backend.generate([prompt] * 4, max_new_tokens=6, temperature=1.0)
    samples = [Sample(f"s{i}", "g", prompt, g.ids, [True] * len(g.ids), g.logps) for i, g in enumerate(gens)]
    batch = collate(samples, backend.pad_id, 4)
    batch.advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])

    def loss_fn(new, b):
        return policy_loss(new, b, 0.0, 0.2, 0.2, token_level=False)

    stats = backend.forward_backward(batch, loss_fn, temperature=1.0)
    assert stats["vllm_logp_abs_diff_max"] < 1e-4
    backend.optimizer_step()
    with pytest.raises(IntegrityError, match="sampled by policy version 0, trained at 1"):
        backend.forward_backward(copy.deepcopy(batch), loss_fn, temperature=1.0)
    backend.zero_grad()
    backend.rollout.sampled_version = backend.policy_version  # pretend: the old samples, the new weights
    stale = backend.forward_backward(batch, loss_fn, temperature=1.0)
    assert stale["vllm_logp_abs_diff_max"] > 1e-3
