"""GSPO (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "GSPOTrainer": "stateset_plugins.trainers.api:GSPOTrainer",
    "GSPOConfig": "stateset_plugins.trainers.objectives.gspo:GSPOConfig",
    "train_with_gspo": "stateset_plugins.trainers.api:train_with_gspo",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
