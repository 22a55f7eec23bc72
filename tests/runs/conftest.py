"""Fixtures for the run-control tests: a private state dir per test (autouse)."""
from __future__ import annotations

from tests.helpers.state_dir import state_dir  # noqa: F401 - autouse: a private kernel state dir per test
