"""RLAIF (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "RLAIFTrainer": "stateset_plugins.trainers.api:RLAIFTrainer",
    "RLAIFConfig": "stateset_plugins.trainers.objectives.rlaif:RLAIFConfig",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
