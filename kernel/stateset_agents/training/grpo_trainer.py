"""GRPO (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "GRPOTrainer": "stateset_plugins.trainers.api:GRPOTrainer",
    "GRPOConfig": "stateset_plugins.trainers.objectives.grpo:GRPOConfig",
    "TrainingFailed": "stateset_plugins.trainers.api:TrainingFailed",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
