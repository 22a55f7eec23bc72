"""Gradient checkpointing (`gradient_checkpointing`): the same samples and the same gradient as without it, on the
full-prompt update path; it only trades activation memory for recomputation. The detached-prompt path (its KV
cache) is refused with it."""
from __future__ import annotations

import pytest
import torch

from tests.helpers.objective_batches import rollout_batch


def _grads(model_dir, **overrides):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model, tokenizer = AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir)
    backend, batch, cfg, obj = rollout_batch(model, tokenizer, "grpo", **overrides)
    batch.rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    batch.advantages = obj.advantages(batch.rewards, 4, cfg)
    batch.ref_logp = backend.logprobs(batch, temperature=cfg.temperature, reference=True)
    backend.forward_backward(batch, lambda new, b: obj.loss(new, b, cfg), temperature=cfg.temperature)
    return backend, batch, [p.grad.clone() for p in backend.trainable_parameters()]


def test_gradient_checkpointing_gives_the_same_samples_and_gradient(tiny_model_dir):
    plain_backend, plain, want = _grads(tiny_model_dir)
    backend, batch, got = _grads(tiny_model_dir, gradient_checkpointing=True)
    assert backend.gradient_checkpointing and not plain_backend.gradient_checkpointing
    base = backend.model.get_base_model()
    assert base.is_gradient_checkpointing
    assert torch.equal(batch.completion_ids, plain.completion_ids)  # sampling unchanged (KV cache kept)
    assert any(g.abs().sum() > 0 for g in want)
    for a, b in zip(want, got):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_gradient_checkpointing_with_a_detached_prompt_is_refused():
    from stateset_agents.core.errors import InputError
    from stateset_plugins.trainers.objectives import get_objective

    with pytest.raises(InputError) as err:
        get_objective("sft").Config(gradient_checkpointing=True, prompt_gradient=False)
    assert err.value.field == "gradient_checkpointing"


_HEAP_PROBE = r"""
import json, os, sys
import torch
from stateset_plugins.models.memory import release_freed_memory
from stateset_plugins.trainers.objectives.sft import SFTConfig

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

applied = release_freed_memory(SFTConfig(release_freed_memory=sys.argv[1] == "on"))
torch.zeros(8 << 20, dtype=torch.uint8)  # freed at once: glibc's dynamic threshold rises past 1 MiB blocks
base = rss_mb()
blocks = [torch.ones(1 << 20, dtype=torch.uint8) for _ in range(200)]  # 200 MiB in 1 MiB tensors
keep = blocks[-1]
del blocks  # all but the last freed: the heap's top block is still in use
print(json.dumps({"applied": applied, "retained_mb": rss_mb() - base}))
"""


@pytest.mark.parametrize("mode", ["off", "on"])
def test_release_freed_memory_returns_freed_tensors_to_the_system(mode):
    import json
    import platform
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's mallopt only")
    out = subprocess.run([sys.executable, "-c", _HEAP_PROBE, mode], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["applied"] == (mode == "on")
    if mode == "on":
        assert got["retained_mb"] < 20, got  # only the live 1 MiB tensor (and noise)
    else:
        assert got["retained_mb"] > 150, got  # glibc keeps the freed blocks below the live one
