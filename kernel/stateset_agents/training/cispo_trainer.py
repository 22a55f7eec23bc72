"""CISPO (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "CISPOTrainer": "stateset_plugins.trainers.api:CISPOTrainer",
    "CISPOConfig": "stateset_plugins.trainers.objectives.cispo:CISPOConfig",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
