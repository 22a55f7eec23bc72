"""Objectives: one small module each (advantage estimator + ratio level + clipping + aggregation).

Every module exposes ``NAME``, ``Config`` (a dataclass whose defaults it documents), ``ROLLOUT`` ("none" for SFT,
"single_turn" or "multi_turn"), ``advantages(rewards, group_size, config)`` and
``loss(new_logp, batch, config) -> (loss, stats)``; DAPO adds ``shape_rewards`` and ``keep_group``. Critic
objectives (PPO, VAPO) set ``VALUE_HEAD = True``, add ``prepare(batch, backend, config)`` (values and GAE before the
update) and ``value_loss(values, batch, config)``, and take the value head's output as a fourth ``loss`` argument.
RLAIF sets ``REWARD = "judge"``: its trainer builds the reward from the config.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from stateset_agents.errors import InputError

ALGORITHMS = ("sft", "grpo", "multi_turn_grpo", "gspo", "dapo", "gepo", "vapo", "ppo", "rlaif", "cispo")


def get_objective(name: str) -> ModuleType:
    if name not in ALGORITHMS:
        raise InputError(f"unknown algorithm {name!r}; choose one of {', '.join(ALGORITHMS)}", field="algorithm")
    return importlib.import_module(f"{__name__}.{name}")
