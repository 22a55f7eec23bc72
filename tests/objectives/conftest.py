"""Fixtures for the objective tests: the training tests' tiny model, toy reward and data (no downloads)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

sys.path.insert(0, str(Path(__file__).parents[1] / "training"))  # toy_rewards: shared with the engine's tests

from toy_rewards import DigitReward, build_tiny_model, make_rows  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

FAST = {"max_new_tokens": 8, "batch_size": 2, "num_generations": 4, "learning_rate": 2e-2, "save_every": 2}


@pytest.fixture()
def make_trainer(tiny_model_dir):
    """make_trainer(algo, output_dir, reward=..., **config) on a freshly loaded tiny model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stateset_plugins.trainers.api import TRAINERS

    def build(algo, output=None, *, reward=None, resume=False, overwrite=False, **config):
        if algo != "rlaif" and reward is None:
            reward = DigitReward()
        return TRAINERS[algo](AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                              AutoTokenizer.from_pretrained(tiny_model_dir), reward=reward, dataset=make_rows(),
                              config={**FAST, **config}, output_dir=output, resume=resume, overwrite=overwrite,
                              base_model_info={"source": "local", "path": str(tiny_model_dir)})

    return build
