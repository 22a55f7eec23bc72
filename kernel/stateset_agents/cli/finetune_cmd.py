"""Run control under `finetune`: status, logs, stop, cancel, checkpoints, prepare-resume (docs/remote.md, "Run
control"). Each command is one call of `stateset_agents.runs`; heavy imports stay inside the bodies."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from .app import console, err_console
from .remote_cmd import _plan_table, _print_json, finetune_app

RUN_ID = typer.Argument(..., help="A run id (see `finetune list`).")


def _checkpoint_line(row: dict[str, Any]) -> str:
    score = (row.get("validation") or {}).get("mean")
    validation = f"validation {score:.4f}" if isinstance(score, (int, float)) else "not evaluated"
    whole = "complete" if row.get("complete") else f"incomplete ({'; '.join(row.get('missing') or [])})"
    return (f"step {row['step']}: {row.get('committed_updates')} committed updates, adapter sha256 "
            f"{str(row.get('sha256'))[:16]}..., {whole}, {validation}")


@finetune_app.command("list")
def finetune_list(as_json: bool = typer.Option(False, "--json")):
    """The training runs recorded here, newest first (reads only)."""
    from .. import runs

    rows = runs.list()
    if as_json:
        return _print_json(rows)
    for r in rows:
        parent = (r.get("resume") or {}).get("parent_run_id")
        console.print(f"{r['run_id']}  {r.get('provider')}  {r.get('phase')}  spent "
                      f"${float(r.get('spend_usd') or 0):.4f} of ${float(r.get('max_cost_usd') or 0):.2f}"
                      + (f"  (continues {parent})" if parent else "")
                      + (f"  children: {', '.join(c['run_id'] for c in r['children'])}" if r["children"] else ""),
                      highlight=False, soft_wrap=True)
    if not rows:
        console.print("no runs recorded")


@finetune_app.command("status")
def finetune_status(run_id: str = RUN_ID):
    """The run's record and the provider's view of its job, with its checkpoints, whether it was stopped and
    whether it is quarantined (reads only)."""
    from .. import runs

    report = runs.status(run_id)
    _print_json(report)
    if report["quarantined"]:
        err_console.print(f"[red]quarantined[/] {run_id}: {report['quarantined'].get('reason')}: "
                          f"{report['quarantined'].get('message')}", highlight=False, soft_wrap=True)
    elif report["phase"] == "stopped":
        last = report["checkpoints"][-1] if report["checkpoints"] else None
        err_console.print(f"stopped {run_id}" + (f" at checkpoint step {last['step']}" if last else ""),
                          highlight=False, soft_wrap=True)


@finetune_app.command("logs")
def finetune_logs(run_id: str = RUN_ID,
                  follow: bool = typer.Option(False, "--follow", "-f", help="Keep reading until the job ends."),
                  as_json: bool = typer.Option(False, "--json", help="One JSON event a line, as the job wrote it.")):
    """The job's events (its events.jsonl), from the provider or the collected copy."""
    import orjson

    from .. import runs

    for event in runs.logs(run_id, follow=follow):
        if as_json:
            sys.stdout.write(orjson.dumps(event).decode() + "\n")
        else:
            detail = event.get("message") or {k: v for k, v in event.items() if k != "type"}
            sys.stdout.write(f"{event.get('type')}: {detail}\n")
        sys.stdout.flush()


@finetune_app.command("stop")
def finetune_stop(run_id: str = RUN_ID,
                  no_wait: bool = typer.Option(False, "--no-wait", help="Ask and return; do not wait for the "
                                                                        "checkpoint."),
                  timeout: float = typer.Option(3600.0, "--timeout", help="Seconds to wait for the stop.")):
    """Cooperative stop: the worker finishes the current update, saves a full checkpoint and ends "stopped";
    nothing is killed. Waits, collects the run (checkpoints included) and reports the checkpoint it saved.
    `finetune cancel` terminates instead."""
    from .. import runs

    result = runs.stop(run_id, wait=not no_wait, timeout_s=timeout)
    if not result["requested"]:
        err_console.print(f"{run_id}: no stop requested ({result.get('message') or 'the job is not running'})",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    if no_wait:
        console.print(f"stop requested for {run_id}; `finetune status {run_id}` shows when it has stopped")
        return
    record = result["record"]
    if record.get("phase") != "stopped":
        err_console.print(f"[red]{record.get('phase')}[/] {run_id}: the job ended {result.get('state')} rather than "
                          f"stopped: {record.get('error') or ''}", highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    point = result.get("checkpoint")
    console.print(f"stopped {run_id}; " + (f"checkpoint {_checkpoint_line(point)}; in {record['output']}" if point
                                           else "no checkpoint was saved")
                  + f"; spent ${float(record.get('spend_usd') or 0):.4f}", highlight=False, soft_wrap=True)
    if point:
        console.print(f"continue it with: stateset-agents finetune prepare-resume {run_id} --checkpoint "
                      f"{point['step']} --workspace DIR --mode exact", highlight=False, soft_wrap=True)


@finetune_app.command("cancel")
def finetune_cancel(run_id: str = RUN_ID):
    """Terminate the run's job now (not cooperative; what it spent is booked): `train-remote --cancel`."""
    from .. import runs

    done = runs.cancel(run_id)
    console.print(f"cancelled {run_id}; spent ${float(done.get('spend_usd') or 0):.4f}")


@finetune_app.command("checkpoints")
def finetune_checkpoints(run_id: str = RUN_ID, as_json: bool = typer.Option(False, "--json")):
    """The run's checkpoints: step, committed updates, adapter sha256, whether complete, validation score."""
    from .. import runs

    rows = runs.checkpoints(run_id)
    if as_json:
        return _print_json(rows)
    for row in rows:
        console.print(_checkpoint_line(row), highlight=False, soft_wrap=True)
    if not rows:
        console.print(f"{run_id} has no checkpoints (yet)")


MODE_HELP = ('"exact" (exact continuation: the whole learner state of a stopped run, same code, model and data), '
             '"weights" (weights only: a new run starting from the checkpoint\'s adapter) or "same-settings" (same '
             "settings: a new run of the parent's settings from the base model). One never becomes another.")


@finetune_app.command("prepare-resume")
def finetune_prepare_resume(
        run_id: str = RUN_ID,
        checkpoint: Optional[int] = typer.Option(None, "--checkpoint", help="The checkpoint's step (see `finetune "
                                                                           "checkpoints`)."),
        workspace: Path = typer.Option(..., "--workspace", help="Private directory for the new plan."),
        mode: str = typer.Option(..., "--mode", help=MODE_HELP),
        max_cost: Optional[float] = typer.Option(None, "--max-cost", help="The child's cap (default: the parent's "
                                                                          "cap less what it spent)."),
        raise_cap: bool = typer.Option(False, "--raise-cap", help="Allow a --max-cost above the parent's remaining "
                                                                  "budget.")):
    """Write a plan that continues RUN_ID from checkpoint K. Rents nothing; `finetune launch DIR` runs it."""
    from .. import runs

    plan = runs.prepare_resume(run_id, checkpoint, workspace, mode, max_cost=max_cost, raise_cap=raise_cap)
    _plan_table(plan)
    where = f" from checkpoint {checkpoint}" if checkpoint is not None else ""
    console.print(f"{plan['_mode_name']} of {run_id}{where}: plan {plan['run_id']} written to "
                  f"{workspace / 'plan.json'}; cap ${plan['max_cost_usd']:.2f} ({plan['_cap_source']}); launch it "
                  f"with: stateset-agents finetune launch {workspace}", highlight=False, soft_wrap=True)
