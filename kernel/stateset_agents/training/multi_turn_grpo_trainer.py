"""Multi-turn GRPO (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "MultiTurnGRPOTrainer": "stateset_plugins.trainers.api:MultiTurnGRPOTrainer",
    "MultiTurnGRPOConfig": "stateset_plugins.trainers.objectives.multi_turn_grpo:MultiTurnGRPOConfig",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
