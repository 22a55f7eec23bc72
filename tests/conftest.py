"""Suite-wide setup: deterministic, offline, and the test-only plugins visible to every runtime."""
from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SUPPORT = Path(__file__).resolve().parent / "support_plugins"

# Subprocess-served plugins inherit these, so test-only components load there too.
os.environ["STATESET_AGENTS_PLUGIN_MODULES"] = "stateset_test_plugins"
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUPPORT), os.environ.get("PYTHONPATH")]))
os.environ.setdefault("STATESET_PLUGIN_QUIET", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(SUPPORT))


@pytest.fixture(autouse=True)
def _seeded():
    random.seed(0)
    yield


@pytest.fixture(scope="session")
def registry():
    from stateset_agents.registry import get_registry

    return get_registry(refresh=True)
