"""Fixtures for the training tests: a tiny random Llama-style model and a byte-level BPE tokenizer trained in
memory with a ChatML template (which, like SmolLM2's, prints only `content`), and toy rewards. No downloads."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # toy_rewards is shared with subprocess runs

from toy_rewards import DigitReward, make_rows  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture()
def digit_reward():
    return DigitReward()


@pytest.fixture()
def rows():
    return make_rows()


FAST = {"max_new_tokens": 8, "batch_size": 2, "num_generations": 4, "learning_rate": 2e-2, "save_every": 2}


@pytest.fixture()
def make_trainer(tiny_model_dir):
    """Build a trainer on a freshly loaded tiny model: make_trainer(algo, output_dir, reward=..., **config)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stateset_plugins.trainers.api import TRAINERS

    def build(algo="grpo", output=None, *, reward=None, dataset=None, eval_prompts=None, resume=False,
              overwrite=False, **config):
        cfg = {**FAST, **config}
        if algo == "sft":
            cfg.pop("num_generations", None)
        model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
        tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
        return TRAINERS[algo](model, tokenizer, reward=reward if reward is not None else DigitReward(),
                              dataset=dataset if dataset is not None else make_rows(), config=cfg,
                              output_dir=output, eval_prompts=eval_prompts, resume=resume, overwrite=overwrite,
                              base_model_info={"source": "local", "path": str(tiny_model_dir)})

    return build
