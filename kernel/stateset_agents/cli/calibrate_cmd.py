"""`stateset-agents improve calibrate`: parse, call `pipeline.calibrate`, render."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..formatting import fmt as _fmt
from .app import console, err_console, improve_app


def _auc(measured: dict) -> str:
    interval = measured["interval"]
    span = f" [{_fmt(interval[0])}, {_fmt(interval[1])}]" if interval else ""
    return f"{_fmt(measured['auc'])}{span}"


@improve_app.command("calibrate")
def calibrate_cmd(
    graded: Path = typer.Option(..., "--graded", help="graded.jsonl from `improve run`."),
    output: Path = typer.Option(..., "--output", help="The reward config file to write (.yaml, or .json)."),
    labels: Optional[Path] = typer.Option(None, "--labels", help='File of {"id", "label"} lines.'),
    transcripts: Optional[Path] = typer.Option(
        None, "--transcripts", help="Ingest folder: message counts, the group key (and labels, with --label-key)."),
    label_key: Optional[str] = typer.Option(None, "--label-key", help="Metadata key holding the label."),
    group_key: Optional[str] = typer.Option(
        None, "--group-key", help="Metadata key whose conversations share a fold (default: task_id where present, "
                                  "else each conversation alone)."),
    reward_config: Optional[Path] = typer.Option(
        None, "--reward-config",
        help="The reward config file the rows were graded with (a calibration in it is replaced)."),
    policy: Optional[Path] = typer.Option(None, "--policy", help="The policy file the rows were graded with."),
    folds: int = typer.Option(5, "--folds", help="Cross-validation folds (grouped, stratified)."),
    seed: int = typer.Option(0, "--seed", help="Seed for the folds and the bootstrap."),
    draws: int = typer.Option(2000, "--draws", help="Bootstrap draws for the AUC intervals (0: none)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
):
    """Fit the weights of a reward's checks to your labels; report out-of-fold AUC; write a reward config."""
    from ..pipeline.calibrate import run_calibrate

    report = run_calibrate(graded, output, labels=labels, transcripts=transcripts, label_key=label_key,
                           group_key=group_key, reward_config=reward_config, policy=policy, folds=folds, seed=seed,
                           draws=draws)
    if as_json:
        import orjson

        typer.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return
    cal, m = report["calibration"], report["measured"]
    fitted = cal["fitted"]
    c = fitted["counts"]
    reward = report["reward"]
    table = Table(title="calibrate (out of fold)", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("reward", f"{reward['name']} {reward.get('version', '')} (config {reward['config_sha256'][:12]})")
    table.add_row("conversations", f"{c['conversations']:,} ({c['positives']:,} positive, {c['negatives']:,} "
                                   f"negative) in {c['groups']:,} groups ({report['grouping']})")
    table.add_row("folds", f"{fitted['folds']} grouped, stratified (seed {fitted['seed']})")
    table.add_row("calibrated AUC", f"{_auc(m['calibrated'])}  {fitted['out_of_fold']['level']:.0%}, groups "
                                    "resampled")
    table.add_row("uncalibrated AUC", _auc(m["uncalibrated"]))
    table.add_row("length-only AUC", f"{_auc(m['length'])} ({report['length_measure']})")
    table.add_row("per fold", ", ".join(
        f"{_fmt(a)} / {_fmt(b)}" for a, b in zip(m["calibrated"]["per_fold"], m["uncalibrated"]["per_fold"]))
        + " (calibrated / uncalibrated)")
    table.add_row("chosen", f"C {fitted['C']}, fill {fitted['fill_rule']}, scaling {fitted['scaling']} "
                            f"({fitted['chosen_by']})")
    console.print(table)
    weights = Table(title="weights (fitted on every labelled conversation)", title_justify="left")
    for name in ("check", "weight", "per sd", "fill"):
        weights.add_column(name, justify="left" if name == "check" else "right")
    for f in cal["features"]:
        weights.add_row(f, _fmt(cal["weights"][f]), _fmt(fitted["standardised_weights"][f]), _fmt(cal["fill"][f]))
    weights.add_row("(intercept)", _fmt(cal["intercept"]), "", "")
    console.print(weights)
    if fitted["dropped_constant"]:
        console.print(f"constant here, not weighted: {', '.join(fitted['dropped_constant'])}")
    for note in report["notes"]:
        err_console.print(f"[yellow]note:[/] {note}", soft_wrap=True)
    console.print(f"Wrote {report['output']}. Use it with --reward-config {report['output']}")
