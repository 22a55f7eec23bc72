"""Fixtures for the GPU-path tests, which run on CPU: a tiny random model (no download) and the fake vLLM."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture()
def fake_vllm(monkeypatch):
    from tests.gpu import fake_vllm

    return fake_vllm.install(monkeypatch)
