"""Every improve test sees the test-only rewards (improve_toy_reward.py), in-process and in subprocesses."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def toy_rewards(monkeypatch):
    from stateset_agents.registry import PLUGIN_MODULES_ENV, get_registry

    modules = [m for m in os.environ.get(PLUGIN_MODULES_ENV, "").split(",") if m]
    monkeypatch.setenv(PLUGIN_MODULES_ENV, ",".join(modules + ["improve_toy_reward"]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.syspath_prepend(str(HERE))
    get_registry(refresh=True)
    from improve_toy_reward import ToyReward

    ToyReward.batch_sizes.clear()
    yield
    monkeypatch.undo()
    get_registry(refresh=True)
