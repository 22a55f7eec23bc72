"""First-party trainers: one engine (`engine`), objectives (`objectives/`), one backend seam (`backend`).

Each objective is registered as `trainer:NAME` by its lazy "module:attr" path (`objectives.FIRST_PARTY`), because
this module is imported by `plugins list` and must not import torch. A third party's objective registers the same
way (`objectives.register_objective`).
"""
from __future__ import annotations

from stateset_agents import hookimpl

from ._version import VERSION
from .objectives import FIRST_PARTY, register_objective
from .cli_options import register_options  # noqa: F401 - hook implementations: pluggy finds them here
from .images import register_images  # noqa: F401


@hookimpl
def register_trainers(register):
    for name, (target, capabilities) in FIRST_PARTY.items():
        register_objective(register, f"{__name__}.objectives.{target}", name=name, version=VERSION,
                           capabilities=capabilities)
