"""`stateset-agents benchmark algorithms | rewards | evidence`: thin wrappers over benchmarks/algorithms.py,
benchmarks/reward_validity.py and benchmarks/evidence.py (a source checkout's)."""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Optional

import typer

from .app import app, console

benchmark_app = typer.Typer(help="Reproducible benchmarks (from a source checkout).", no_args_is_help=True)
app.add_typer(benchmark_app, name="benchmark")


def _load(script: str = "algorithms"):
    from ..core.errors import InputError

    for base in (Path.cwd(), *Path(__file__).resolve().parents):
        path = base / "benchmarks" / f"{script}.py"
        if path.exists():
            spec = importlib.util.spec_from_file_location(f"stateset_benchmarks_{script}", path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise InputError(f"benchmarks/{script}.py not found: run from a stateset-agents source checkout")


@benchmark_app.command("algorithms")
def algorithms(
    algorithms: Optional[str] = typer.Option(None, "--algorithms",
                                             help="Comma-separated objectives (default: the benchmark's matrix; "
                                                  "GRPO is the paired baseline)."),
    seeds: int = typer.Option(6, "--seeds", help="Seeds per objective (the pairing unit)."),
    steps: int = typer.Option(40, "--steps", help="Committed updates per run (matched across objectives)."),
    model: str = typer.Option("tiny-random", "--model", help="tiny-random, a local path, .gguf or hub id."),
    output: Optional[Path] = typer.Option(None, "--output", help="Directory (default benchmarks/results/algorithms)."),
):
    """Objectives x seeds on one task with matched budgets: JSONL, a Markdown table and a reward-curve plot."""
    module = _load()
    chosen = algorithms.split(",") if algorithms else list(module.DEFAULT_ALGORITHMS)
    module.run_matrix(chosen, seeds, steps, model, output,
                      log=lambda line: console.print(line, highlight=False))
    out = output or module.ROOT / "benchmarks" / "results" / "algorithms"
    console.print((Path(out) / "table.md").read_text(), highlight=False)


@benchmark_app.command("rewards")
def rewards(
    data: Optional[Path] = typer.Option(None, "--data", help="Folder holding the benchmark's data sets "
                                                             "(default ../shared/data beside the checkout)."),
    output: Optional[Path] = typer.Option(None, "--output", help="Directory (default benchmarks/results)."),
    folds: int = typer.Option(5, "--folds", help="Folds, grouped by task and stratified."),
    seed: int = typer.Option(0, "--seed", help="Seed for the folds and the bootstrap."),
    draws: int = typer.Option(2000, "--draws", help="Bootstrap draws (tasks resampled) per interval."),
    trajectories: str = typer.Option("trajectories.dev.json", "--trajectories",
                                     help="Which file of DATA/tau-airline/ (e.g. held-out tasks in the same format)."),
):
    """Reward validity out of fold: leave-tasks-out AUC of each reward (shipped, calibrated per fold, length-only)
    on tau-airline, and the arithmetic reward's agreement with its labels."""
    module = _load("reward_validity")
    report = module.run(data or module.DATA, output, folds=folds, seed=seed, draws=draws, trajectories=trajectories,
                        log=lambda line: console.print(line, highlight=False))
    typer.echo(module.render(report))  # plain: a Markdown table pastes as printed


@benchmark_app.command("evidence")
def evidence(
    fast: bool = typer.Option(False, "--fast", help="The tiny random model: the mechanics, not evidence."),
    only: Optional[str] = typer.Option(None, "--only", help="Comma-separated data sources (samples, tau-airline)."),
    work: Optional[Path] = typer.Option(None, "--work", help="Run folders (default ~/.cache/stateset-agents/"
                                                             "evidence/); a rerun skips finished runs."),
    output: Optional[Path] = typer.Option(None, "--output", help="Directory (default benchmarks/results)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Folder holding tau-airline/ (default ../shared/data)."),
):
    """The shipped recipe (SFT -> GRPO) over 6 seeds and SFT alone over 3 on the sample logs, the recipe over 3
    seeds on tau-airline; each run's nominated checkpoint looked at once on test; the gate per recipe."""
    module = _load("evidence")
    plan = [p for p in module.PLAN if not only or p[0] in only.split(",")]
    report = module.run(plan, fast=fast, work=work, output=output, data_root=data or module.DATA,
                        log=lambda line: console.print(line, highlight=False))
    typer.echo(module.render(report))
