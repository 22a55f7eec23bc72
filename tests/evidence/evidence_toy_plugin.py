"""Registers the training tests' toy reward (`reward:toy_digits`) so evidence commands can load it by name,
in-process and in subprocess-served components alike (tests/evidence/conftest.py adds this module)."""
from __future__ import annotations

from stateset_agents import hookimpl
from tests.helpers.toy_rewards import DigitReward


@hookimpl
def register_rewards(register):
    register(DigitReward)
