"""The `trainer:*` component: one generic class that runs any `Objective` on the shared engine.

`register_objective` registers an objective at ``"module:Class"`` as the target
``"stateset_plugins.trainers.components:module:Class"``; when the registry loads it, this module's `__getattr__`
imports the objective and returns `trainer_component(objective)`, a subclass of `ObjectiveTrainer` with its name
and version. No component class is written per objective.
"""
from __future__ import annotations

import functools
from typing import Any, ClassVar, Iterator, Mapping

from stateset_agents import Trainer

from ._version import CAPABILITIES
from .objectives import load_objective
from .objectives.base import Objective
from .run import train_run


class ObjectiveTrainer(Trainer):
    """Runs `objective` from a JSON-shaped request (`trainers.run` documents its fields)."""

    objective: ClassVar[type[Objective]]
    capabilities = CAPABILITIES

    def run(self, request: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        request = {**dict(self.config), **dict(request), "algorithm": self.name}
        yield from train_run(request, stop=self._cancel, objective=self.objective())

    @classmethod
    def python_api(cls) -> dict[str, Any]:
        """``<Stem>Trainer``, ``<Stem>Config``, ``train_with_<name>`` and ``TrainingFailed``: what
        `stateset_agents.training.<name>_trainer` exports."""
        from .api import TrainingFailed, train_with, trainer_class

        objective = cls.objective
        trainer = trainer_class(objective)
        return {trainer.__name__: trainer, f"{objective.class_stem()}Config": objective.Config,
                f"train_with_{objective.name}": train_with(objective), "TrainingFailed": TrainingFailed}


@functools.lru_cache(maxsize=None)  # one component class per objective
def trainer_component(objective: type[Objective]) -> type[ObjectiveTrainer]:
    name = f"{objective.class_stem()}Component"
    return type(name, (ObjectiveTrainer,), {
        "objective": objective, "name": objective.name, "version": objective.version, "__module__": __name__,
        "__qualname__": name, "__doc__": f"trainer:{objective.name}: {objective.__module__}.{objective.__qualname__} "
                                         "on the shared engine."})


def __getattr__(target: str) -> type[ObjectiveTrainer]:
    """``components:<module>:<Class>`` (what `register_objective` registers): the component of that objective."""
    if ":" not in target:
        raise AttributeError(f"module {__name__!r} has no attribute {target!r}")
    return trainer_component(load_objective(target))
