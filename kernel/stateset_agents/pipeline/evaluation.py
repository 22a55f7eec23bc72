"""`evaluate`: which adapter, which output, the evaluator's request, the test look recorded. The CLI and the MCP server
both call `run_evaluate`; they only parse and render."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.errors import InputError, StatesetError


def evaluator_for(capability: str) -> str:
    """The evaluator component that does `capability` ("paired", "judge", "chat"): found by what it declares."""
    from ..core.registry import get_registry

    return get_registry().offering("evaluator", capability).full_name


def run_component(component: str, request: dict[str, Any], runtime: str, what: str,
                  on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run an evaluator, each event handed to `on_event`; its completed event, or an error."""
    from ..core.runtimes import load_component

    last: dict[str, Any] = {}
    with load_component(component, runtime=runtime) as evaluator:
        for event in evaluator.run(request):
            last = event
            if on_event is not None:
                on_event(event)
    if last.get("type") != "completed":
        raise StatesetError(f"{what} failed: {last.get('message') or 'no completed event'}")
    return last


def run_evaluate(*, prompts: str | Path, reward: str, reward_config: Mapping[str, Any] | None = None,
                 adapter: str | Path | None = None, run: str | Path | None = None, output: str | Path | None = None,
                 split: str | None = None, again: bool = False, base_model: str | None = None,
                 dataset: str | Path | None = None, drop_overlap: bool = False,
                 protocol: Mapping[str, Any] | None = None, runtime: str = "inprocess",
                 reward_runtime: str = "inprocess",
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Paired evaluation of an adapter (or a run's final adapter, or with split "test" its nominated checkpoint,
    the look recorded). Returns {"completed": the evaluator's completed event, "nominated", "look", "title"}."""
    from . import nomination as nom

    if split not in (None, "validation", "test"):
        raise InputError(f"--split is validation or test, got {split!r}", field="split")
    if (adapter is None) == (run is None):
        raise InputError("give --adapter DIR or --run RUN (one of them)", field="adapter")
    nominated = None
    if split == "test":
        if run is None:
            raise InputError("--split test evaluates a run's nominated checkpoint: give --run RUN, not --adapter",
                             field="run")
        nominated = nom.nomination_of(run)
        nom.check_test_look(run, nominated, again=again)
        adapter = Path(run) / nominated["adapter"]["path"]
        output = output or Path(run) / nom.TEST_DIR / f"step-{nominated['step']:06d}"
    elif again:
        raise InputError("--again goes with --split test", field="again")
    adapter = adapter or Path(run) / "adapter"
    if output is None:
        raise InputError("--output is required (except with --split test)", field="output")
    request = {"adapter": str(adapter), "prompts": str(prompts), "reward": reward,
               "reward_config": dict(reward_config or {}), "reward_runtime": reward_runtime, "output": str(output),
               "base_model": base_model, "dataset": str(dataset) if dataset else None, "drop_overlap": drop_overlap,
               "protocol": dict(protocol or {}), "split": split}
    last = run_component(evaluator_for("paired"), request, runtime, "evaluation", on_event)
    title, look = "paired evaluation (descriptive: one run)", None
    if nominated is not None:
        look = nom.record_test_look(run, nominated, Path(last["output"]), last["results"], again=again)
        title = f"test look at nominated checkpoint {nominated['step']}" + (" (again)" if look["again"] else "")
    return {"completed": last, "nominated": nominated, "look": look, "title": title}
