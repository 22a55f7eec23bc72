"""Fixtures for the objective tests: the training tests' tiny model, toy reward and data (no downloads)."""
from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tests.helpers.toy_rewards import trainer_factory  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture()
def make_trainer(tiny_model_dir):
    """make_trainer(algo, output_dir, reward=..., **config) on a freshly loaded tiny model."""
    return trainer_factory(tiny_model_dir)
