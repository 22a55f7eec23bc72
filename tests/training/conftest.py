"""Fixtures for the training tests: a tiny random Llama-style model and a byte-level BPE tokenizer trained in
memory with a ChatML template (which, like SmolLM2's, prints only `content`), and toy rewards. No downloads."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tests.helpers.toy_rewards import DigitReward, make_rows, trainer_factory  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture()
def digit_reward():
    return DigitReward()


@pytest.fixture()
def rows():
    return make_rows()


@pytest.fixture()
def make_trainer(tiny_model_dir):
    """Build a trainer on a freshly loaded tiny model: make_trainer(algo, output_dir, reward=..., **config)."""
    return trainer_factory(tiny_model_dir)
