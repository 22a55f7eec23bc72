"""The trainers' Python faces, made from the registry: for every registered `trainer:NAME`, the module
`stateset_agents.training.NAME_trainer` exports what the trainer class's `python_api()` returns (for an objective
on the shared engine: ``<Stem>Trainer``, ``<Stem>Config``, ``train_with_NAME``, ``TrainingFailed``):

    from stateset_agents.training.gspo_trainer import GSPOTrainer, GSPOConfig, train_with_gspo

A third party's trainer gets its module the same way. No module file exists per trainer: an import hook makes it,
and the names resolve on first attribute access, so importing one imports the plugin (and torch) only when a name
is used, and this package names no plugin.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

SUFFIX = "_trainer"


def _trainer_name(fullname: str) -> str | None:
    """``stateset_agents.training.NAME_trainer`` -> "NAME"; None for any other module name."""
    head, _, tail = fullname.rpartition(".")
    if head != __name__ or not tail.endswith(SUFFIX) or len(tail) == len(SUFFIX):
        return None
    return tail[:-len(SUFFIX)]


def _spec(name: str):
    from ..core.registry import get_registry

    return get_registry().components.get(f"trainer:{name}")


class _TrainerModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `NAME_trainer` for each registered trainer NAME (after the files on disk: none are there)."""

    def find_spec(self, fullname, path=None, target=None):
        name = _trainer_name(fullname)
        if name is None or _spec(name) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=f"registry:trainer:{name}")

    def create_module(self, spec):
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        name = _trainer_name(module.__name__)
        module.__doc__ = f"The Python face of trainer:{name}, from its registered class (`python_api`)."

        def __getattr__(attr: str) -> Any:
            if attr.startswith("__") and attr != "__all__":
                raise AttributeError(attr)  # import machinery probes (__path__, __file__, ...): not ours to resolve
            names = _load(module, name)
            if attr == "__all__":
                return list(names)
            if attr not in names:
                offered = ", ".join(names) or "nothing (this trainer has no Python API)"
                raise AttributeError(f"module {module.__name__!r} has no attribute {attr!r}; it offers {offered}")
            return names[attr]

        def __dir__() -> list[str]:
            return sorted(set(module.__dict__) | set(_load(module, name)))

        module.__getattr__, module.__dir__ = __getattr__, __dir__


def _load(module: ModuleType, name: str) -> dict[str, Any]:
    """The trainer's names, loaded once and kept in the module (later lookups skip `__getattr__`)."""
    loaded = module.__dict__.get("_names")
    if loaded is None:
        spec = _spec(name)
        if spec is None:
            raise ImportError(f"trainer:{name} is no longer registered")
        loaded = dict(spec.load_class().python_api())
        module.__dict__.update(loaded)
        module._names, module.__all__ = loaded, list(loaded)
    return loaded


def __getattr__(attr: str) -> ModuleType:
    """``stateset_agents.training.gspo_trainer`` as an attribute, importing it on first use."""
    if _trainer_name(f"{__name__}.{attr}") is None:
        raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")
    try:
        return importlib.import_module(f"{__name__}.{attr}")
    except ModuleNotFoundError:
        raise AttributeError(f"module {__name__!r} has no attribute {attr!r} (no trainer:"
                             f"{attr[:-len(SUFFIX)]} is registered)") from None


if not any(isinstance(f, _TrainerModules) for f in sys.meta_path):
    sys.meta_path.append(_TrainerModules())
