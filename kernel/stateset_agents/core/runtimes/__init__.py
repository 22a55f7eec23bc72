"""Runtimes: where a component runs. Each returns an object with the component kind's Python interface
(`stateset_agents.core.components`), so the pipeline cannot tell them apart.

* `inprocess`: the component class, instantiated here.
* `subprocess`: `stateset-agents plugin serve KIND:NAME` in a child process, spoken to over gRPC.
* `container`: the same entrypoint in the image `stateset-agents images build` made (`runtimes/container.py`).

`RUNTIMES` names every runtime; `available_runtimes()` those this machine can use now.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..components import Component
from ..errors import StatesetError
from ..registry import ComponentSpec, get_registry

RUNTIMES = ("inprocess", "subprocess", "container")


def available_runtimes(spec: ComponentSpec | None = None) -> tuple[str, ...]:
    """The runtimes usable here (for `spec`: container only when a Docker daemon answers and a built image holds
    it). Never imports the docker SDK unless asked."""
    from .container import daemon_available, image_for

    found = ["inprocess", "subprocess"]
    if (spec is None or image_for(spec) is not None) and daemon_available():
        found.append("container")
    return tuple(found)


def load_component(name: str, *, kind: str | None = None, config: Mapping[str, Any] | None = None,
                   runtime: str = "inprocess", **options: Any) -> Component:
    """Build component `name` (`KIND:NAME` or a unique bare name) with `config`, served by `runtime`.

    Use it as a context manager (or call `.close()`) so out-of-process servers are shut down.
    """
    spec = get_registry().resolve(name, kind)
    return load_spec(spec, config=config, runtime=runtime, **options)


def load_spec(spec: ComponentSpec, *, config: Mapping[str, Any] | None = None, runtime: str = "inprocess",
              **options: Any) -> Component:
    if runtime == "inprocess":
        return spec.load_class()(config)
    if runtime == "subprocess":
        from .launcher import launch_subprocess

        spec.load_class()  # fail here, clearly, if its dependencies are missing
        return launch_subprocess(spec, config=config, **options)
    if runtime == "container":
        from .container import launch_container

        return launch_container(spec, config=config, **options)  # the image, not this host, needs its dependencies
    raise StatesetError(f"unknown runtime {runtime!r}; choose one of {', '.join(RUNTIMES)}")
