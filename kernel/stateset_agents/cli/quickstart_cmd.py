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
    threads: int = typer.Option(0, "--threads", help="CPU threads for torch (default: the cores the load leaves "
                                                     "free)."),
):
    """Run ingest -> improve -> a supervised parent -> an RL child from it -> nominate -> one test look, on sample
    logs (their recipe: samples/quickstart.json)."""
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

        result = run_quickstart(output, fast=fast, overwrite=overwrite, on_step=on_step, on_event=on_event,
                                threads=threads or None)
    _summary(result)


def _stats_line(totals: dict, stats: dict) -> str:
    interval = stats.get("interval") or {}
    return (f"{_fmt(totals.get('base_mean'))} -> {_fmt(totals.get('candidate_mean'))} over {totals.get('cases')} "
            f"cases: "
            f"{totals.get('improved')} improved, {totals.get('regressed')} regressed, {totals.get('unchanged')} "
            f"unchanged; mean difference {_fmt(stats.get('mean_difference'))}, 95% interval "
            f"[{_fmt(interval.get('low'))}, {_fmt(interval.get('high'))}], p = {_fmt(stats.get('p_value'))}")


def _regressions_line(fell: list[dict]) -> str:
    """How far the cases that fell fell, beside the drop the gate tolerates (a case's score can move by a step of
    the reward's scale between two failing answers)."""
    from ..pipeline.gate import DEFAULT_TOLERANCE

    worst = min(fell, key=lambda c: c["difference"])
    past = sum(1 for c in fell if c["difference"] < -DEFAULT_TOLERANCE)
    return (f"{len(fell)}; largest drop {_fmt(-worst['difference'])} ({worst['id']}: {_fmt(worst['base'])} -> "
            f"{_fmt(worst['candidate'])}); {past or 'none'} past the gate's tolerance of {DEFAULT_TOLERANCE}")


def _summary(result) -> None:
    from rich.table import Table

    from ..pipeline.quickstart import CHILD, PARENT

    ing, imp, test = result.ingest, result.improve, result.test
    counts = imp.get("counts", {})
    table = Table(title="quickstart: the loop on sample logs", show_header=False)
    table.add_row("recipe", f"{result.recipe}: {PARENT} on the curated turns, then {CHILD} from that parent "
                            f"(--init-adapter); {result.threads} CPU thread(s)")
    table.add_row("ingested", f"{ing.get('written')} conversations ({ing.get('rejected', 0)} rejected, "
                              f"{ing.get('duplicates', 0)} duplicates)")
    table.add_row("graded", f"{counts.get('turns_graded')} assistant turns with reward:{imp['reward']['name']}")
    table.add_row("curated", f"{counts.get('curated')} turns at or above {imp.get('threshold')}")
    table.add_row(f"{CHILD} training reward (first -> last step)",
                  f"{_fmt(result.first_reward)} -> {_fmt(result.last_reward)}")
    nom = result.nomination
    val = nom.get("validation") or {}
    table.add_row("nominated checkpoint (best on validation)",
                  f"step {nom.get('step')} of {nom.get('final_step')}: validation {_fmt(val.get('base_mean'))} -> "
                  f"{_fmt(val.get('candidate_mean'))}")
    totals, stats = test.get("totals") or {}, test.get("statistics") or {}
    table.add_row(f"test reward:{(test.get('reward') or {}).get('name')} base -> adapter", _stats_line(totals, stats))
    fell = test.get("regressions") or []
    if fell:
        table.add_row("  regressed cases", _regressions_line(fell))
    complete = test.get("complete_cases") or {}
    if complete.get("totals"):
        table.add_row("  cases neither side cut", _stats_line(complete["totals"], complete.get("statistics") or {}))
    trunc = test.get("truncation") or {}
    table.add_row("  truncated answers (failures)", f"base {trunc.get('base')}, adapter {trunc.get('candidate')}")
    for name, block in (result.unoptimised or {}).items():
        table.add_row(f"not optimised: {name}", _stats_line(block["totals"], block["statistics"]))
    run = result.run
    table.add_row("adapter (nominated)", str(run / nom.get("adapter", {}).get("path", "adapter")))
    table.add_row("manifest (lineage)", str(run / "manifest.json"))
    table.add_row("test results", str(run / "test" / f"step-{nom.get('step', 0):06d}" / "eval_results.json"))
    table.add_row("summary", str(result.workdir / "quickstart_summary.json"))
    console.print(table)
    console.print("one seed: a descriptive result; `stateset-agents benchmark evidence` runs the recipe across seeds",
                  highlight=False)
