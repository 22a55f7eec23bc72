"""DAPO (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "DAPOTrainer": "stateset_plugins.trainers.api:DAPOTrainer",
    "DAPOConfig": "stateset_plugins.trainers.objectives.dapo:DAPOConfig",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
