"""SFT (lazy: resolved from the trainer plugin on first use)."""
from __future__ import annotations

from . import resolve

_NAMES = {
    "SFTTrainer": "stateset_plugins.trainers.api:SFTTrainer",
    "SFTConfig": "stateset_plugins.trainers.objectives.sft:SFTConfig",
}
__all__ = list(_NAMES)


def __getattr__(name: str):
    return resolve(globals(), _NAMES, name)
