"""`stateset-agents quickstart`: the whole loop on bundled sample logs."""
from __future__ import annotations

from pathlib import Path

import typer

from .app import app, console, err_console
from ..formatting import fmt as _fmt


@app.command()
def quickstart(
    fast: bool = typer.Option(False, "--fast", help="Use a tiny random model: about a minute, a tour of the files."),
    output: Path = typer.Option(Path("stateset-quickstart"), "--output", help="Working directory."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an earlier quickstart in --output."),
):
    """Run ingest -> improve -> GRPO training -> held-out evaluation on sample support logs, offline."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..pipeline.quickstart import run_quickstart

    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err_console, transient=False) as progress:
        task = progress.add_task("starting", total=None)

        def on_step(message: str) -> None:
            err_console.print(f"[cyan]>[/] {message}", highlight=False)
            progress.update(task, description=message.split(":")[0], completed=0, total=None)

        def on_event(event: dict) -> None:
            kind = event.get("type")
            if kind == "progress" and event.get("total"):
                progress.update(task, description=event.get("phase", "train"), completed=event.get("step", 0),
                                total=event["total"])
            elif kind == "log":
                err_console.print(f"  {event.get('message', '')}", highlight=False)

        result = run_quickstart(output, fast=fast, overwrite=overwrite, on_step=on_step, on_event=on_event)
    _summary(result)


def _summary(result) -> None:
    from rich.table import Table

    ing, imp, done = result.ingest, result.improve, result.train
    counts = imp.get("counts", {})
    table = Table(title="quickstart: the loop on sample logs", show_header=False)
    table.add_row("ingested", f"{ing.get('written')} conversations ({ing.get('rejected', 0)} rejected, "
                              f"{ing.get('duplicates', 0)} duplicates)")
    table.add_row("graded", f"{counts.get('turns_graded')} assistant turns with reward:{imp['reward']['name']}")
    table.add_row("curated", f"{counts.get('curated')} turns at or above {imp.get('threshold')}")
    table.add_row("training reward (first -> last step)", f"{_fmt(result.first_reward)} -> {_fmt(result.last_reward)}")
    totals = (done.get("eval") or {}).get("totals") or {}
    if totals:
        table.add_row("held-out reward: base -> adapter",
                      f"{_fmt(totals.get('base_mean'))} -> {_fmt(totals.get('candidate_mean'))} "
                      f"({totals.get('improved')} improved, {totals.get('regressed')} regressed, "
                      f"{totals.get('unchanged')} unchanged; one seed: descriptive only)")
    run = result.workdir / "runs" / "grpo"
    table.add_row("adapter", str(run / "adapter"))
    table.add_row("manifest (lineage)", str(run / "manifest.json"))
    table.add_row("held-out results", str(run / "eval_results.json"))
    console.print(table)
