"""The industry tests: a private state dir per test, and a test-only recipe whose generator leaks across splits."""
from __future__ import annotations

import os

import pytest

from tests.helpers.state_dir import state_dir  # noqa: F401 - autouse: a private kernel state dir per test




@pytest.fixture()
def leaky_recipe(monkeypatch):
    """`leaky` registered (tests/industry/leaky_recipe.py) for this test only."""
    from stateset_agents.core.registry import PLUGIN_MODULES_ENV, get_registry

    modules = [m for m in os.environ.get(PLUGIN_MODULES_ENV, "").split(",") if m]
    monkeypatch.setenv(PLUGIN_MODULES_ENV, ",".join(modules + ["tests.industry.leaky_recipe"]))
    get_registry(refresh=True)
    yield "leaky"
    monkeypatch.undo()
    get_registry(refresh=True)
