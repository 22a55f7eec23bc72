"""A local training run as every face starts it (the `train` command, the MCP `train` tool, the gateway's jobs):
the trainer chosen from the registry, the request the `trainer:*` component takes, its events, and what its last
event means. The faces parse their own arguments and render; the run itself is this one path."""
from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping

from ..core.errors import InputError, PluginError, StatesetError

#: The capability of a trainer that runs `nproc` ranks itself (under torchrun).
MULTI_PROCESS = "multi_process"
#: The face whose defaults (`default:train`) and options (`register_options`) a local run takes.
FACE = "train"


def resolve_trainer(algorithm: str | None, *, nproc: int = 1):
    """The trainer component's spec: `algorithm`, else the one declaring `default:train`; it must declare
    "local", and "multi_process" when more than one process is asked for."""
    from ..core.registry import get_registry

    registry = get_registry()
    algorithm = algorithm or registry.default("trainer", "local", face=FACE)
    if not algorithm:
        raise InputError("name the trainer with --algorithm (`train --help` lists them)", field="algorithm")
    spec = registry.require(algorithm, "trainer", "local", "`train` (a run on this machine)")
    if nproc > 1 and MULTI_PROCESS not in spec.capabilities:  # it would ignore nproc and train on one process
        raise InputError(f"--nproc {nproc}: trainer {spec.name} does not declare '{MULTI_PROCESS}' (it runs as one "
                         "process); use --nproc 1", field="nproc")
    return spec


def train_request(*, dataset: Any, output: Any, reward: str | None = None,
                  reward_config: Mapping[str, Any] | None = None, reward_runtime: str = "inprocess",
                  base_model: str | None = None, eval_prompts: Any = None, init_adapter: Any = None,
                  steps: int | None = None, seed: int | None = None, save_every: int | None = None,
                  config: Mapping[str, Any] | None = None, resume: bool = False, overwrite: bool = False,
                  reload: bool = False, drop_overlap: bool = False, nproc: int = 1,
                  eval: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The request a `trainer:*` component runs (the trainer plugin's `train_run` documents the fields)."""
    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    return {"dataset": str(dataset), "reward": reward, "reward_config": dict(reward_config or {}),
            "reward_runtime": reward_runtime, "base_model": base_model, "eval_prompts": text(eval_prompts),
            "output": str(output), "steps": steps, "seed": seed, "save_every": save_every,
            "config": dict(config or {}), "resume": resume, "overwrite": overwrite, "reload": reload,
            "drop_overlap": drop_overlap, "nproc": nproc, "init_adapter": text(init_adapter),
            "eval": dict(eval or {})}


def run_training(spec, request: Mapping[str, Any], *,
                 bind_cancel: Callable[[Callable[[], None]], Callable[[], None]] | None = None
                 ) -> Iterator[dict[str, Any]]:
    """The trainer's events, the last `completed` or `failed`. `bind_cancel(cancel)` hooks the face's stop (a
    signal, a cancelled call) to the trainer's cooperative stop and returns what unhooks it."""
    from ..core.runtimes import load_component

    with load_component(spec.full_name, runtime="inprocess") as trainer:
        unbind = bind_cancel(trainer.cancel) if bind_cancel else None
        try:
            for event in trainer.run(dict(request)):
                if not isinstance(event, dict) or not isinstance(event.get("type"), str) or not event["type"]:
                    raise PluginError(spec.full_name, "run", f"yielded {event!r:.200}, not an event object with a "
                                                             "type")
                yield event
        except (StatesetError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001 - the trainer's own failure: named, never a traceback
            raise PluginError(spec.full_name, "run", f"{type(exc).__name__}: {exc}") from exc
        finally:
            if unbind:
                unbind()


def raise_unless_completed(last: Mapping[str, Any]) -> None:
    """Fail closed on anything but a `completed` last event. A stop on request is `Stopped` (the run resumes with
    the same arguments plus resume); a quarantined run says so (resume is refused until reload)."""
    if last.get("type") == "completed":
        return
    message = last.get("message") or "the run ended without completing"
    if last.get("reason") == "interrupted":
        raise Stopped(message)
    if last.get("reason") == "quarantined":
        raise StatesetError(f"training quarantined: {message}")
    raise StatesetError(f"training failed: {message}")


class Stopped(StatesetError):
    """The run stopped on request after saving a checkpoint: not a failure, not a completion."""

    exit_code = 130
