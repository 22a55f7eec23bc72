"""A trainer's child process starts on jemalloc when it is installed: the resident size then follows the live
tensors (benchmarks/bench_memory.py), and nothing it computes changes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stateset_plugins.models.allocator import ALLOCATOR_ENV, allocator_env, jemalloc_library

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux's")


def _fake_library(tmp_path: Path) -> Path:
    (tmp_path / "libjemalloc.so.2").write_bytes(b"")
    return tmp_path


def test_the_environment_preloads_jemalloc_only_when_found_and_not_refused(tmp_path):
    dirs = (str(_fake_library(tmp_path)),)
    library = str(tmp_path / "libjemalloc.so.2")
    assert allocator_env({}, dirs=dirs) == {"LD_PRELOAD": library}
    assert allocator_env({"LD_PRELOAD": "/x/libother.so"}, dirs=dirs) == {"LD_PRELOAD": f"{library}:/x/libother.so"}
    assert allocator_env({ALLOCATOR_ENV: "system"}, dirs=dirs) == {}
    assert allocator_env({"LD_PRELOAD": library}, dirs=dirs) == {}  # already there: not twice
    assert allocator_env({}, dirs=(str(tmp_path / "none"),)) == {}  # not installed: the C library's
    assert allocator_env({ALLOCATOR_ENV: library}, dirs=()) == {"LD_PRELOAD": library}
    from stateset_agents.core.errors import InputError

    with pytest.raises(InputError, match=ALLOCATOR_ENV):
        allocator_env({ALLOCATOR_ENV: str(tmp_path / "missing.so")})


def test_trainers_and_evaluators_ask_for_it_and_the_launcher_adds_it(monkeypatch):
    from stateset_agents.core.registry import get_registry
    from stateset_agents.core.runtimes.launcher import child_env

    registry = get_registry()
    for full in ("trainer:sft", "trainer:grpo", "evaluator:paired"):
        spec = registry.resolve(full)
        assert spec.child_env == "stateset_plugins.models.allocator:allocator_env"
        assert child_env(spec, {ALLOCATOR_ENV: "system"}) == {}
    assert registry.resolve("reward:tool_calling").child_env is None


def test_a_child_env_that_fails_stops_the_launch():
    import dataclasses

    from stateset_agents.core.errors import PluginError
    from stateset_agents.core.registry import get_registry
    from stateset_agents.core.runtimes.launcher import child_env

    spec = dataclasses.replace(get_registry().resolve("trainer:sft"), child_env="os.path:no_such_function")
    with pytest.raises(PluginError, match="child_env"):
        child_env(spec, {})


TRAIN = r"""
import hashlib, json, sys
import torch
torch.manual_seed(0); torch.set_num_threads(1)
from transformers import AutoModelForCausalLM, AutoTokenizer
from stateset_agents.training.sft_trainer import SFTTrainer
from stateset_plugins.models.allocator import active_allocator
model_dir, out = sys.argv[1], sys.argv[2]
rows = [{"id": f"r{i}", "prompt": [{"role": "user", "content": f"order {i} please"}],
         "completion": {"role": "assistant", "content": f"Order {i} ships today."}} for i in range(4)]
trainer = SFTTrainer(AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir),
                     dataset=rows, config={"steps": 2, "batch_size": 4, "update_rows": 2, "save_every": 2},
                     output_dir=out)
losses = [e["metrics"]["loss"] for e in trainer.events() if e["type"] == "metrics"]
state = trainer.backend.model.state_dict()
digest = hashlib.sha256(b"".join(v.detach().numpy().tobytes() for k, v in sorted(state.items()) if "lora" in k))
print(json.dumps({"allocator": active_allocator(), "losses": losses, "lora_sha256": digest.hexdigest()}))
"""


@pytest.mark.skipif(jemalloc_library() is None, reason="jemalloc is not installed (scripts/system-deps installs it)")
def test_training_on_jemalloc_gives_the_same_bytes(tiny_model_dir, tmp_path):
    runs = {}
    for choice in ("system", "auto"):
        env = {**os.environ, ALLOCATOR_ENV: choice, "OMP_NUM_THREADS": "1"}
        env.update(allocator_env(env))
        proc = subprocess.run([sys.executable, "-c", TRAIN, str(tiny_model_dir), str(tmp_path / choice)],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs[choice] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs["system"]["allocator"] == "system" and runs["auto"]["allocator"] == "jemalloc"
    assert runs["system"]["losses"] == runs["auto"]["losses"] and len(runs["auto"]["losses"]) == 2
    assert runs["system"]["lora_sha256"] == runs["auto"]["lora_sha256"]
