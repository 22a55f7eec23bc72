"""tests/engines: the engines' own code, run in their own venvs (`scripts/engine-venvs`). Where a venv is missing,
its tests skip with the reason, except under CI=true, where they fail: CI never silently drops them."""
from __future__ import annotations

import os

import pytest


@pytest.fixture
def engine_python():
    def need(engine: str):
        from stateset_agents.core.errors import StatesetError
        from stateset_plugins.engines.pins import require_engine

        try:
            return require_engine(engine)
        except StatesetError as exc:
            if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
                pytest.fail(f"CI=true and the {engine} venv is not usable: {exc}")
            pytest.skip(f"the {engine} venv is not usable here: {exc}")

    return need
