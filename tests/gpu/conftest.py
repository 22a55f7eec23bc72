"""Fixtures for the GPU-path tests, which run on CPU: a tiny random model (no download) and the fake vLLM."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # fake_vllm

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture()
def fake_vllm(monkeypatch):
    import fake_vllm

    return fake_vllm.install(monkeypatch)
