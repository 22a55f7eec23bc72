"""VAPO (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "VAPOTrainer": "stateset_plugins.trainers.api:VAPOTrainer",
    "VAPOConfig": "stateset_plugins.trainers.objectives.vapo:VAPOConfig",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
