"""GEPO (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "GEPOTrainer": "stateset_plugins.trainers.api:GEPOTrainer",
    "GEPOConfig": "stateset_plugins.trainers.objectives.gepo:GEPOConfig",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
