"""Suite-wide setup: deterministic, offline, and the test-only plugins visible to every runtime."""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Subprocess-served plugins inherit these, so test-only components load there too: the registry imports the
# module by its dotted name, here through pytest's `pythonpath` (the repo root), in a child through PYTHONPATH.
os.environ["STATESET_AGENTS_PLUGIN_MODULES"] = ("tests.support_plugins.stateset_test_plugins,"
                                              "tests.support_plugins.stateset_fault_plugins")
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
os.environ.setdefault("STATESET_PLUGIN_QUIET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _seeded():
    random.seed(0)
    yield


@pytest.fixture(scope="session")
def registry():
    from stateset_agents.core.registry import get_registry

    return get_registry(refresh=True)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama-style model and an offline byte-level tokenizer, built once per session."""
    from stateset_plugins.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture()
def tiny(tiny_model_dir):
    """A fresh (model, tokenizer) pair loaded from the session's tiny model directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)
