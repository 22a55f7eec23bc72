"""`stateset-agents improve run | status | audit`: parse, call `pipeline.improve` / `pipeline.audit`, render."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from ..pipeline.improve import CHUNK_BYTES, DEFAULT_BASE_MODEL, DEFAULT_BATCH, DEFAULT_HELD_OUT, DEFAULT_THRESHOLD
from .app import console, err_console, improve_app
from .options import REWARD_FILE_HELP
from ..formatting import fmt as _fmt


@improve_app.command("run")
def run_cmd(
    transcripts: Path = typer.Option(..., "--transcripts", help="Folder written by `ingest` (its transcripts.jsonl)."),
    reward: Optional[str] = typer.Option(None, "--reward", help="Reward component: NAME or reward:NAME."),
    output: Path = typer.Option(..., "--output", help="Folder for graded.jsonl, curated.jsonl and the summary."),
    threshold: float = typer.Option(DEFAULT_THRESHOLD, "--threshold",
                                    help="Curate applicable turns scoring at least this."),
    policy: Optional[Path] = typer.Option(None, "--policy",
                                          help="Policy file (YAML or JSON), given to the reward as config.policy."),
    runtime: str = typer.Option("inprocess", "--runtime", help="Where the reward runs: inprocess, subprocess or container."),
    held_out: float = typer.Option(DEFAULT_HELD_OUT, "--held-out",
                                   help="Share of groups (task or customer id, else conversation) for validation, "
                                        "and the same share again for test (0: none)."),
    base_model: Optional[str] = typer.Option(DEFAULT_BASE_MODEL, "--base-model",
                                             help="Base model named in the train command (default: none, so "
                                                  "train loads its offline default)."),
    batch_size: int = typer.Option(DEFAULT_BATCH, "--batch-size", help="Conversations per grading call."),
    reward_file: Optional[Path] = typer.Option(None, "--reward-config", help=REWARD_FILE_HELP),
    workers: Optional[int] = typer.Option(None, "--workers",
                                          help="Grading processes (default: one per core); outputs are the same "
                                               "bytes as one process's. With --engine ray: workers to keep busy "
                                               "(default: the cluster's CPUs)."),
    engine: str = typer.Option("local", "--engine", help="Where workers run: local (processes here) or ray."),
    address: Optional[str] = typer.Option(None, "--address",
                                          help="With --engine ray: the cluster to join (default: start a local "
                                               "one)."),
    chunk_bytes: int = typer.Option(CHUNK_BYTES, "--chunk-bytes", hidden=True,
                                    help="Input bytes per worker chunk."),
):
    """Grade every assistant turn with a reward and curate the best into a training set."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from ..pipeline.improve import run_improve

    with Progress(SpinnerColumn(), TextColumn("[bold]grading[/] {task.description}"), TimeElapsedColumn(),
                  console=err_console, transient=True) as progress:
        task = progress.add_task("", total=None)

        def on_progress(done: dict[str, int]) -> None:
            progress.update(task, description=f"{done['conversations']:,} conversations, {done['turns']:,} turns")

        summary = run_improve(transcripts, reward, output, threshold=threshold, policy=policy, runtime=runtime,
                              held_out_fraction=held_out, base_model=base_model, batch_size=batch_size,
                              reward_config=reward_file, on_progress=on_progress,
                              workers=_workers(workers, engine), engine=engine, address=address,
                              chunk_bytes=chunk_bytes)
    _render_summary(summary)
    if summary["counts"]["curated"] == 0:
        err_console.print("[yellow]warning:[/] no turn reached the threshold; see next_steps.md")
    console.print(f"\nWrote {summary['output_dir']}. Next, train on it:")
    typer.echo(summary["train_command"])  # plain echo: never wrapped, so it pastes as printed


def _workers(workers: Optional[int], engine: str) -> Optional[int]:
    """None for Ray (the cluster's CPUs); here, one per core unless told."""
    if workers is not None or engine == "ray":
        return workers
    from ..pipeline.grading_engines import default_workers

    return default_workers()


@improve_app.command("status")
def status_cmd(
    directory: Path = typer.Argument(..., help="An `improve run` output folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
):
    """Show what an `improve run` produced."""
    from ..pipeline.improve import read_summary

    summary = read_summary(directory)
    if as_json:
        import orjson

        typer.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
        return
    _render_summary(summary)
    if summary.get("legacy"):
        err_console.print(f"[yellow]note:[/] {summary['legacy']}", highlight=False)
    typer.echo(summary["train_command"])


def _render_summary(s: dict[str, Any]) -> None:
    c, scores, reward = s["counts"], s["scores"], s["reward"]
    table = Table(title="improve", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    source = s["input"]["transcripts"]
    table.add_row("transcripts", f"{source['path']} (sha256 {source['sha256'][:12]})")
    table.add_row("reward", f"{reward['component']} {reward['version']} (config {reward['config_sha256'][:12]})")
    table.add_row("threshold", _fmt(s["threshold"], 2))
    table.add_row("conversations", f"{c['conversations']:,}")
    table.add_row("turns graded", f"{c['turns_graded']:,} ({c['applicable']:,} applicable)")
    table.add_row("curated", f"{c['curated']:,} turns from {c['curated_conversations']:,} conversations")
    if "validation_prompts" in c:
        table.add_row("validation", f"{c['validation_conversations']:,} conversations, "
                                    f"{c['validation_prompts']:,} prompts")
        table.add_row("test", f"{c['test_conversations']:,} conversations, {c['test_prompts']:,} prompts "
                              f"({c['held_out_turns_withheld']:,} passing turns withheld in all)")
    else:  # a schema-1 folder
        table.add_row("held out", f"{c['held_out_conversations']:,} conversations, {c['held_out_prompts']:,} "
                                  f"prompts ({c['held_out_turns_withheld']:,} passing turns withheld)")
    q = scores["quantiles"]
    table.add_row("score", f"mean {_fmt(scores['mean'])}; min {_fmt(q['p0'])} p25 {_fmt(q['p25'])} "
                           f"median {_fmt(q['p50'])} p75 {_fmt(q['p75'])} max {_fmt(q['p100'])}")
    counts = scores["histogram"]["counts"]
    widest = max(counts) or 1
    edges = scores["histogram"]["edges"]
    for i, n in enumerate(counts):
        bar = "█" * round(24 * n / widest)
        table.add_row("" if i else "histogram", f"{edges[i]:.1f}-{edges[i + 1]:.1f} {bar} {n:,}")
    for name, check in scores["checks"].items():
        table.add_row(f"check {name}", f"mean {_fmt(check['mean'])} over {check['n']:,}")
    for name, info in s["outputs"].items():
        state = info.get("state")
        mark = "" if state in (None, "ok") else f" [red]{state}[/]"
        table.add_row(name, f"{info['rows']:,} rows, {info['bytes']:,} bytes{mark}")
    console.print(table)


@improve_app.command("audit")
def audit_cmd(
    graded: Optional[Path] = typer.Option(None, "--graded", help="graded.jsonl from `improve run`."),
    labels: Optional[Path] = typer.Option(None, "--labels", help='File of {"id", "label"} lines.'),
    transcripts: Optional[Path] = typer.Option(None, "--transcripts",
                                               help="Ingest folder whose metadata holds the label (with --label-key), "
                                                    "or whose conversations --robustness breaks."),
    label_key: Optional[str] = typer.Option(None, "--label-key", help="Metadata key holding the label."),
    rollup: str = typer.Option("mean", "--rollup", help="A conversation's score: mean or min of its applicable turns."),
    threshold: float = typer.Option(DEFAULT_THRESHOLD, "--threshold",
                                    help="The curation threshold, for the confusion table."),
    top: int = typer.Option(10, "--top", help="How many disagreements to list."),
    draws: int = typer.Option(2000, "--draws", help="Bootstrap draws for the AUC interval (0: none)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    robustness: bool = typer.Option(False, "--robustness",
                                    help="Instead: break the transcripts' replies and calls on purpose and report, "
                                         "per kind of breakage, how often the reward scores the real one higher."),
    reward: Optional[str] = typer.Option(None, "--reward", help="With --robustness: NAME or reward:NAME."),
    policy: Optional[Path] = typer.Option(None, "--policy",
                                          help="With --robustness: policy file, given to the reward as config.policy."),
    reward_file: Optional[Path] = typer.Option(None, "--reward-config", help=REWARD_FILE_HELP),
    runtime: str = typer.Option("inprocess", "--runtime", help="With --robustness: where the reward runs."),
    kinds: Optional[str] = typer.Option(None, "--kinds", help="With --robustness: breakages to run, comma-separated "
                                                               "(default: all; an unknown name lists them)."),
    seed: int = typer.Option(0, "--seed", help="With --robustness: seed of the breakages."),
    examples: int = typer.Option(3, "--examples", help="With --robustness: fooling cases to show per kind."),
    output: Optional[Path] = typer.Option(None, "--output", help="With --robustness: also write the report here."),
    limit: Optional[int] = typer.Option(None, "--limit", help="With --robustness: the first N conversations only."),
    decisions_only: bool = typer.Option(False, "--decisions-only",
                                        help="With --robustness: count only the copies that change a write or "
                                             "hand-off call (the decisions a policy reward judges)."),
):
    """How well does the reward track a label? ROC AUC, Spearman, confusion table, a length baseline.
    With --robustness: does it score broken replies below real ones? Win rate per kind of breakage."""
    from ..core.errors import InputError
    from ..pipeline.audit import run_audit

    if robustness:
        if graded is not None or labels is not None or label_key is not None:
            raise InputError("--robustness grades the transcripts itself: give --transcripts DIR --reward R, "
                             "not --graded, --labels or --label-key")
        if transcripts is None:
            raise InputError("--robustness needs --transcripts DIR (a folder written by `ingest`)",
                             field="transcripts")
        _robustness_audit(transcripts, reward, policy, reward_file, runtime, kinds, seed, examples, output, limit,
                          decisions_only, as_json)
        return
    given = [flag for flag, value in (("--reward", reward), ("--policy", policy), ("--reward-config", reward_file),
                                      ("--kinds", kinds), ("--output", output), ("--limit", limit),
                                      ("--decisions-only", decisions_only or None)) if value is not None]
    if given:
        raise InputError(f"{', '.join(given)}: only with --robustness (a label audit reads the grades in --graded)")
    if graded is None:
        raise InputError("give --graded FILE (graded.jsonl from `improve run`), or --robustness", field="graded")
    report = run_audit(graded, labels=labels, transcripts=transcripts, label_key=label_key, rollup=rollup,
                       threshold=threshold, top=top, draws=draws)
    if as_json:
        import orjson

        typer.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return
    c, auc = report["counts"], report["auc"]
    table = Table(title=f"audit ({report['rollup']} of applicable turns)", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("matched", f"{c['matched']:,} conversations ({c['positives']:,} positive, {c['negatives']:,} "
                             f"negative; {report['positive_if']})")
    table.add_row("left out", f"{c['no_applicable_turn']:,} without an applicable turn, {c['unlabelled']:,} "
                              f"unlabelled, {c['labels_without_grades']:,} labels without grades")
    interval = ""
    if auc["interval"]:
        interval = f" [{_fmt(auc['interval'][0])}, {_fmt(auc['interval'][1])}] {auc['level']:.0%}"
    table.add_row("ROC AUC", f"{_fmt(auc['value'])}{interval}")
    table.add_row("length baseline AUC", f"{_fmt(report['length_baseline']['auc'])} "
                                         f"({report['length_baseline']['measure']})")
    table.add_row("Spearman", _fmt(report["spearman"]))
    console.print(table)

    cm = report["confusion"]
    confusion = Table(title=f"at threshold {cm['threshold']}", title_justify="left")
    confusion.add_column("")
    confusion.add_column("label positive", justify="right")
    confusion.add_column("label negative", justify="right")
    confusion.add_row("score >= threshold", str(cm["tp"]), str(cm["fp"]))
    confusion.add_row("score < threshold", str(cm["fn"]), str(cm["tn"]))
    console.print(confusion)
    console.print(f"precision {_fmt(cm['precision'])}, recall {_fmt(cm['recall'])}, accuracy {_fmt(cm['accuracy'])}")

    if report["disagreements"]:
        worst = Table(title="largest disagreements", title_justify="left")
        for name in ("conversation", "score", "label", "lowest turn", "reason"):
            worst.add_column(name)
        for d in report["disagreements"]:
            worst.add_row(d["conversation_id"], _fmt(d["score"]), str(d["label"]), _fmt(d["lowest_turn"]),
                          d["lowest_reason"])
        console.print(worst)
    for note in report["notes"]:
        err_console.print(f"[yellow]note:[/] {note}")


def _robustness_audit(transcripts: Path, reward: Optional[str], policy: Optional[Path], reward_file: Optional[Path],
                      runtime: str, kinds: Optional[str], seed: int, examples: int, output: Optional[Path],
                      limit: Optional[int], decisions_only: bool, as_json: bool) -> None:
    """`improve audit --robustness`: run the breakages (`pipeline.robustness`) and render the report."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..pipeline.robustness import parse_kinds, run_robustness
    from .options import reward_and_config

    parse_kinds(kinds)  # a bad name fails before the reward is built
    reward, config = reward_and_config(reward, policy, reward_file)
    with Progress(TextColumn("[bold]grading[/] conversations and their broken copies"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=err_console, transient=True) as progress:
        task = progress.add_task("", total=None)
        report = run_robustness(transcripts, reward, config, kinds=kinds, seed=seed, examples=examples,
                                runtime=runtime, output=output, limit=limit, decisions_only=decisions_only,
                                on_progress=lambda done, total: progress.update(task, completed=done, total=total))
    if as_json:
        import orjson

        typer.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return
    r = report["reward"]
    table = Table(title=f"robustness of {r['component']} {r['version']} on {report['conversations']:,} conversations "
                        f"(seed {report['seed']}{'; copies that change a decision only' if decisions_only else ''})",
                  title_justify="left")
    table.add_column("breakage", no_wrap=True)
    for name in ("applied", "win rate", "95% CI", "ceiling", "w/t/l"):
        table.add_column(name, justify="right")
    for kind, k in report["kinds"].items():
        rate = k["win_rate"]
        style = "" if rate is None else "green" if rate >= 0.9 else "yellow" if rate >= 0.7 else "red"
        shown = f"[{style}]{_fmt(rate)}[/]" if style else _fmt(rate)
        interval = f"{k['interval'][0]:.2f}-{k['interval'][1]:.2f}" if k["interval"] else "n/a"
        table.add_row(kind, f"{k['applied']:,}", shown, interval, _fmt(k["best_possible"], 2),
                      f"{k['wins']:,}/{k['ties']:,}/{k['losses']:,}")
    console.print(table)
    console.print("win rate: the share of conversations where the original scores strictly higher than its broken "
                  "copy (ties count half; w/t/l: wins, ties, losses), with its 95% interval; a conversation scores "
                  "the mean of its applicable turns. ceiling: the best win rate possible here (an original scoring "
                  "0 can at best tie).")

    def clip(value, width: int = 160) -> str:
        text = value if isinstance(value, str) else f"{value.get('name')}({value.get('arguments')})"
        text = " ".join(text.split())
        return escape(text if len(text) <= width else text[:width - 1] + "…")

    for kind, k in report["kinds"].items():
        if k["examples"]:
            console.print(f"\n[bold]{kind}[/] ({k['description']}): copies that fooled the reward")
        for e in k["examples"]:
            console.print(f"  {escape(e['conversation_id'])}: {_fmt(e['original_score'])} -> broken "
                          f"{_fmt(e['broken_score'])} ({e['outcome']}; turn {e['turn_index']})")
            lines = [("original", e["original"]), ("broken", e["broken"]), ("reason", e["reason"])]
            if e.get("details"):
                lines.insert(2, ("changed", ", ".join(f"{k}: {v}" for k, v in e["details"].items())))
            for label, value in lines:
                console.print(f"    {label:8} {clip(value)}", highlight=False)
    if report["weakest"] is not None:
        console.print(f"weakest: {report['weakest']} "
                      f"(win rate {_fmt(report['kinds'][report['weakest']]['win_rate'])})")
    if output is not None:
        console.print(f"Wrote {output}")
