"""Hosted backends: a service that holds the model and runs the backend's operations (generate, log-probs,
forward-backward, optimizer step, save/load) behind the `backend.Backend` interface, such as River's.

A training request's ``backend`` field ``{"kind": KIND, ...}`` (the provider that hosts the job writes it) picks
one; a package offers a kind under the entry-point group `GROUP`:

    [project.entry-points."stateset_plugins.backends"]
    river = "stateset_plugins.providers.river.backend:backend_from_spec"

The factory takes ``(options, tokenizer, config, *, value_head)``: the request's ``backend`` fields other than
``kind``, the tokenizer of the base model it serves, the objective's config, and whether the objective trains a
value head. The trainers never import a hosted backend by name.
"""
from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any, Mapping

from stateset_agents.core.errors import InputError

GROUP = "stateset_plugins.backends"


def kinds() -> dict[str, Any]:
    """Installed hosted backends: kind -> entry point."""
    return {ep.name: ep for ep in entry_points(group=GROUP)}


def backend_from_spec(spec: Mapping[str, Any], tokenizer, config, *, value_head: bool = False):
    """The hosted backend a request's ``backend`` field names."""
    options = dict(spec)
    kind = options.pop("kind", None)
    installed = kinds()
    if kind not in installed:
        known = ", ".join(sorted(installed)) or "none installed"
        raise InputError(f"unknown backend kind {kind!r}; choose local (the default) or a hosted one ({known})",
                         field="backend")
    return installed[kind].load()(options, tokenizer, config, value_head=value_head)
