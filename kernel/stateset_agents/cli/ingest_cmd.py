"""`stateset-agents ingest`: logs -> transcripts. The work is `pipeline.ingest.run_ingest`; this only renders."""
from __future__ import annotations

from typing import Any, Optional

import typer

from .app import app, console, err_console
from .registry_params import one_of, registry_command


@app.command(cls=registry_command(help={"format": one_of("ingestor", lead="Log format (an installed ingestor)")}))
def ingest(
    format: str = typer.Option(..., "--format", "-f", help="Log format (an installed ingestor)."),
    input: str = typer.Option(..., "--input", "-i", help="A .jsonl / .jsonl.gz file, or a directory of them "
                                                         "(read in name order)."),
    output: str = typer.Option(..., "--output", "-o", help="Directory for transcripts.jsonl, rejects.jsonl and "
                                                           "ingest_summary.json."),
    redact: bool = typer.Option(False, "--redact", help="Replace e-mail addresses, phone, card and IBAN numbers, "
                                                        "IP addresses and SSNs with placeholders."),
    runtime: str = typer.Option("inprocess", "--runtime", help="Where the ingestor runs: inprocess, subprocess or container."),
    workers: Optional[int] = typer.Option(None, "--workers",
                                          help="Parsing processes (default: one per core); outputs are the same "
                                               "bytes as one process's. Gzipped files are decompressed here, and "
                                               "a file of call logs is ingested on one process from its first "
                                               "call on; an ingestor that cannot split a file runs on one."),
    chunk_bytes: Optional[int] = typer.Option(None, "--chunk-bytes", hidden=True,
                                              help="Input bytes per worker chunk."),
):
    """Turn conversation logs into transcripts, one conversation a line. Bad lines go to rejects.jsonl; the run
    fails only when nothing could be ingested."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn

    from ..pipeline.ingest import REJECTS, TRANSCRIPTS, run_ingest

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("[dim]{task.fields[status]}"), console=console, transient=True) as bar:
        task = bar.add_task("ingest", total=None, status="")

        def show(update: dict[str, Any]) -> None:
            done = update["file_index"] - (0 if update["line"] is None else 1)
            status = (f"line {update['line'] or 0}: {update['written']} written, {update['duplicates']} duplicates, "
                      f"{update['rejected']} rejected")
            bar.update(task, total=update["files"], completed=done, description=update["path"], status=status)

        chunking = {} if chunk_bytes is None else {"chunk_bytes": chunk_bytes}
        summary = run_ingest(format, input, output, redact=redact, runtime=runtime, progress=show,
                             workers=_workers(workers), **chunking)

    _print_summary(summary)
    console.print(f"wrote {output}/{TRANSCRIPTS} ({summary['written']} conversations) and "
                  f"{output}/{REJECTS} ({summary['rejected']} rejected lines)", highlight=False)
    if summary["written"] == 0:
        err_console.print("[bold red]error:[/] nothing could be ingested; see the rejects for why", highlight=False)
        raise typer.Exit(1)


def _workers(workers: Optional[int]) -> int:
    """One per core unless told."""
    if workers is not None:
        return workers
    from ..pipeline.grading_engines import default_workers

    return default_workers()


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"ingest ({summary['format']})", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    for key in ("read", "written", "duplicates", "rejected"):
        table.add_row("lines read" if key == "read" else key, str(summary[key]))
    for reason, count in summary["rejected_by_reason"].items():
        table.add_row(f"  rejected: {reason}", str(count))
    calls = summary["call_logs"]
    if calls["calls"]:
        table.add_row("call logs stitched", f"{calls['calls']} calls -> {calls['conversations']} conversations")
        if calls["unstitched"]:
            table.add_row("  unstitched", str(calls["unstitched"]))
    for label, count in (summary["redactions"] or {}).items():
        if count:
            table.add_row(f"redacted {label}", str(count))
    console.print(table)
