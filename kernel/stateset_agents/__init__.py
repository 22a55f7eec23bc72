"""StateSet Agents: the kernel.

The kernel defines contracts (the gRPC services in `contracts/`, their Python faces in `components`), finds plugins
through the `stateset_agents` entry-point group, and runs each component in-process or out of process. It imports no
plugin and nothing heavy at import time; the trainer classes below are a lazy facade over the trainer plugins.
"""
from __future__ import annotations

from .core._version import __version__
from .core.components import (
    Component,
    Evaluator,
    GradeItem,
    Ingestor,
    LinesNeedContext,
    Provider,
    Reject,
    Reward,
    Source,
    Trainer,
    TurnGrade,
)
from .core.errors import StatesetError
from .core.hookspec import hookimpl

__all__ = [
    "__version__", "hookimpl", "Component", "Ingestor", "Reward", "Trainer", "Evaluator", "Provider", "TurnGrade",
    "GradeItem", "Source", "Reject", "LinesNeedContext", "StatesetError", "GRPOTrainer", "MultiTurnGRPOTrainer",
]

# Public trainer imports, resolved on first use so `import stateset_agents` stays light.
_LAZY = {
    "GRPOTrainer": "stateset_agents.training.grpo_trainer",
    "MultiTurnGRPOTrainer": "stateset_agents.training.multi_turn_grpo_trainer",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stateset_agents' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
