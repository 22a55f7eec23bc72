"""Objectives: one small module each (advantage estimator + ratio level + clipping + aggregation).

Every module exposes ``NAME``, ``Config`` (a dataclass whose defaults it documents), ``ROLLOUT`` ("none" for SFT,
"single_turn" or "multi_turn"), ``advantages(rewards, group_size, config)`` and
``loss(new_logp, batch, config) -> (loss, stats)``; DAPO adds ``shape_rewards`` and ``keep_group``.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from stateset_agents.errors import InputError

ALGORITHMS = ("sft", "grpo", "multi_turn_grpo", "gspo", "dapo")


def get_objective(name: str) -> ModuleType:
    if name not in ALGORITHMS:
        raise InputError(f"unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}", field="algorithm")
    return importlib.import_module(f"{__name__}.{name}")
