"""Every improve test sees the test-only rewards (improve_toy_reward.py), in-process and in subprocesses."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def toy_rewards(monkeypatch):
    from stateset_agents.core.registry import PLUGIN_MODULES_ENV, get_registry

    modules = [m for m in os.environ.get(PLUGIN_MODULES_ENV, "").split(",") if m]
    # a dotted name: subprocesses import it through the repo root on PYTHONPATH (tests/conftest.py)
    monkeypatch.setenv(PLUGIN_MODULES_ENV, ",".join(modules + ["tests.improve.improve_toy_reward"]))
    get_registry(refresh=True)
    from tests.improve.improve_toy_reward import ToyReward

    ToyReward.batch_sizes.clear()
    yield
    monkeypatch.undo()
    get_registry(refresh=True)
