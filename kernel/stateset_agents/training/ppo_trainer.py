"""PPO (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "PPOTrainer": "stateset_plugins.trainers.api:PPOTrainer",
    "PPOConfig": "stateset_plugins.trainers.objectives.ppo:PPOConfig",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
