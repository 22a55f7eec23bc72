"""Objectives: one small module each, one `Objective` subclass in it (see `base` for every hook and its default).

A first-party objective is its module plus one line in `FIRST_PARTY`; the trainers plugin registers each as
`trainer:NAME`, lazily, by "module:attr" (so `plugins list` never imports torch).

A third party adds an objective the same way from its own package: a module with the `Objective` subclass, and a
light module named by an entry point in the `stateset_agents` group that registers it with `register_objective`.
After `pip install`, `stateset-agents train --algorithm NAME` runs it on the shared engine, `plugins list` lists it,
and `stateset_agents.training.NAME_trainer` exports ``<Stem>Trainer``, ``<Stem>Config`` and ``train_with_NAME``.
`examples/stateset-trainer-rloo` is such a package: REINFORCE leave-one-out in about 40 lines (an `advantages` and
a `loss` method), registered by `register_objective(register, "stateset_trainer_rloo.objective:RLOO", ...)`.

The registered name and version must be the class's (the registry checks on load). docs/plugins.md has the table of
hooks.

Importing this package is light: `Objective` and the config classes import no torch; `policy_loss` and the other
shared pieces of `common` load on first use.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable, Iterable

from stateset_agents.core.errors import InputError, StatesetError

from .._version import CAPABILITIES

if TYPE_CHECKING:
    from .base import Objective

#: Re-exported on first use, so that a plugin's hook module importing `register_objective` stays as light as it
#: can be (`plugins list` and every `--help` load it): the base class and configs, and the shared pieces of
#: `common` (those import torch).
_CONFIGS = ("TrainConfig", "PolicyConfig", "RLConfig", "ValueConfig")
_COMMON = ("group_advantages", "policy_loss", "clipped_surrogate", "kl_term", "masked_token_mean",
           "masked_sequence_mean", "safe", "gae", "terminal_rewards")
__all__ = ["Objective", "TrainConfig", "PolicyConfig", "RLConfig", "ValueConfig", "register_objective",
           "get_objective", "objective_class", "objective_names", "load_objective", "COMPONENT", "FIRST_PARTY",
           "ALGORITHMS", "REQUIRES", "INSTALL", *_COMMON]

#: name -> (class in this package, capabilities beyond every engine objective's). "remote": train-remote may run
#: it (River runs no value head; the remote recipes are tested on these five).
#: "default": `train` runs it when no --algorithm is given; "default:train-remote" likewise for train-remote.
#: "local-studio": `stateset-agents studio` offers it for local runs.
FIRST_PARTY: dict[str, tuple[str, tuple[str, ...]]] = {
    "sft": ("sft:SFT", ("remote", "default:train-remote", "local-studio")),
    "grpo": ("grpo:GRPO", ("remote", "default", "local-studio")),
    "multi_turn_grpo": ("multi_turn_grpo:MultiTurnGRPO", ("remote",)),
    "gspo": ("gspo:GSPO", ("remote", "local-studio")),
    "dapo": ("dapo:DAPO", ("remote", "local-studio")),
    "gepo": ("gepo:GEPO", ()),
    "vapo": ("vapo:VAPO", ()),
    "ppo": ("ppo:PPO", ()),
    "rlaif": ("rlaif:RLAIF", ()),
    "cispo": ("cispo:CISPO", ()),
}
#: The first-party objectives' names (the registry may hold more: a plugin's).
ALGORITHMS = tuple(FIRST_PARTY)

#: What every objective on the shared engine needs installed, and the command that installs it.
REQUIRES = ("torch", "transformers", "peft")
INSTALL = "pip install 'stateset-agents[train]'"
#: A trainer's child process starts on jemalloc when it is installed (`models.allocator`): its resident size then
#: follows the live tensors instead of glibc's heap high-water mark.
CHILD_ENV = "stateset_plugins.models.allocator:allocator_env"


#: The generic component every objective is registered as: its target is ``COMPONENT:<module>:<Class>``.
COMPONENT = "stateset_plugins.trainers.components"


def register_objective(register: Callable[..., None], target: str, *, name: str, version: str,
                       capabilities: Iterable[str] = (), requires: Iterable[str] = (),
                       install: str | None = None) -> None:
    """Register the `Objective` subclass at ``target`` ("module:Class", imported only when used) as
    ``trainer:NAME``, run by the trainers plugin's generic component: with the engine's dependencies (torch,
    transformers, peft; ``requires`` adds more, ``install`` replaces the install command) and capabilities ("lora",
    "checkpoint_resume", "eval_results", "local"; ``capabilities`` adds more: "remote" where train-remote may run
    it, "gpu" where it needs one). ``name`` and ``version`` must be the class's."""
    module, _, attr = target.partition(":") if isinstance(target, str) else ("", "", "")
    if not module or not attr.isidentifier():
        raise StatesetError(f"register_objective({name!r}): target must be a 'module:Class' path, got {target!r}")
    register(f"{COMPONENT}:{target}", name=name, version=version, requires=[*REQUIRES, *requires],
             install=install or INSTALL, capabilities=tuple(dict.fromkeys((*CAPABILITIES, *capabilities))),
             child_env=CHILD_ENV)


def load_objective(target: str) -> type[Objective]:
    """Import the `Objective` subclass at ``target`` ("module:Class")."""
    from .base import Objective

    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr, None)
    if not (isinstance(cls, type) and issubclass(cls, Objective)):
        raise StatesetError(f"{target} is not a stateset_plugins.trainers.objectives.Objective subclass")
    return cls


def objective_class(name: str) -> type[Objective]:
    """The `Objective` subclass registered as ``trainer:NAME`` (first-party or a plugin's)."""
    from stateset_agents.core.errors import UnknownComponent
    from stateset_agents.core.registry import get_registry

    registry = get_registry()
    try:
        spec = registry.resolve(name, "trainer")
    except UnknownComponent:
        known = ", ".join(objective_names(registry)) or "none installed"
        raise InputError(f"unknown algorithm {name!r}; choose one of {known}", field="algorithm") from None
    component, _, target = spec.target.partition(":") if isinstance(spec.target, str) else ("", "", "")
    if component != COMPONENT:
        raise InputError(f"{spec.full_name} is not an objective of the shared engine (plugin {spec.plugin} "
                         "registers its own trainer class)", field="algorithm")
    spec.load_class()  # refuses missing dependencies, and a name or version the class does not have
    return load_objective(target)


def get_objective(name: str) -> Objective:
    """The objective ``trainer:NAME``, ready for the engine."""
    return objective_class(name)()


def objective_names(registry=None) -> list[str]:
    """The registered objectives' names (first-party and plugins'), without importing them."""
    from stateset_agents.core.registry import get_registry

    return [s.name for s in (registry or get_registry()).all("trainer")
            if isinstance(s.target, str) and s.target.partition(":")[0] == COMPONENT]


def __getattr__(name: str) -> Any:
    if name == "Objective":
        from .base import Objective

        return Objective
    if name in _CONFIGS:
        from .. import config

        return getattr(config, name)
    if name in _COMMON:
        from . import common

        return getattr(common, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
