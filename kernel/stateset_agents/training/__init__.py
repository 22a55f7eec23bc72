"""Lazy facade over the trainer plugin: `stateset_agents.training.<algo>_trainer` modules resolve their names from
`stateset_plugins.trainers` on first attribute access, so importing the kernel never imports torch."""
from __future__ import annotations

import importlib
from typing import Any


def resolve(module_globals: dict[str, Any], names: dict[str, str], name: str) -> Any:
    """Import `names[name]` ("module:attr"), cache it in the facade module, and return it."""
    target = names.get(name)
    if target is None:
        raise AttributeError(f"module {module_globals['__name__']!r} has no attribute {name!r}")
    module, attr = target.split(":")
    value = getattr(importlib.import_module(module), attr)
    module_globals[name] = value
    return value
