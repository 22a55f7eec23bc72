"""A private kernel state directory per test (runs, ledgers, providers' jobs): an autouse fixture a conftest
imports (`from tests.helpers.state_dir import state_dir`), never one conftest importing another."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    path = tmp_path / "state"
    monkeypatch.setenv("STATESET_AGENTS_STATE_DIR", str(path))
    return path
