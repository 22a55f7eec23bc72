"""What the watch screen shows, read from where the CLI's commands read it (no Textual here).

A run is followed by its run id (a run the studio, `train-remote` or `finetune launch` started: its job's events
through `runs.logs`, its checkpoints and phase through `runs.status`) or by its run directory (any run, `train`'s
too: RUN/metrics.jsonl, `plugin_api.checkpoints.checkpoint_table` and `run_state`). Both end at the same files
once the run is collected: metrics.jsonl, the checkpoints and eval_results.json. The job's "metrics" events carry
the rows the trainer writes to metrics.jsonl, so both ways plot the same points.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import StatesetError

#: The curves (metrics.jsonl keys), in the order the screen cycles through them.
CURVES = ("reward_mean", "reward_std", "loss", "kl", "clip_fraction", "tokens_per_s")


@dataclass
class Snapshot:
    """Everything the watch screen draws, as of one poll."""

    points: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    committed: int = 0
    budget: int | None = None
    phase: str = "empty"
    checkpoints: list[dict[str, Any]] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    results: dict[str, Any] | None = None
    error: str | None = None
    run_dir: Path | None = None


def _add_metrics(snap: Snapshot, row: dict[str, Any]) -> None:
    step = row.get("step")
    if not isinstance(step, int):
        return
    snap.committed = max(snap.committed, step)
    for key in CURVES:
        value = row.get(key)
        if isinstance(value, (int, float)) and value == value:  # NaN never plots
            snap.points.setdefault(key, []).append((step, float(value)))


def _event_line(event: dict[str, Any]) -> str:
    detail = event.get("message") or {k: v for k, v in event.items() if k not in ("type", "metrics")}
    return f"{event.get('type')}: {detail}"


def read_run_dir(run_dir: Path, snap: Snapshot | None = None) -> Snapshot:
    """A run directory as it is now: metrics.jsonl, checkpoints, state, eval_results.json."""
    from ..core.jsonio import load_json, read_jsonl
    from ..plugin_api.checkpoints import checkpoint_table, run_state

    snap = snap or Snapshot()
    snap.run_dir = Path(run_dir)
    metrics = snap.run_dir / "metrics.jsonl"
    if metrics.is_file():
        snap.points, snap.committed = {}, 0
        try:
            for _, row in read_jsonl(metrics):
                if isinstance(row, dict):
                    _add_metrics(snap, row)
        except Exception as exc:  # noqa: BLE001 - a line being written: the next poll reads it whole
            snap.error = str(exc)
    snap.checkpoints = checkpoint_table(snap.run_dir)
    snap.phase = run_state(snap.run_dir)
    manifest = snap.run_dir / "manifest.json"
    if snap.budget is None and manifest.is_file():
        steps = ((load_json(manifest).get("config") or {}).get("steps"))
        snap.budget = steps if isinstance(steps, int) else None
    results = snap.run_dir / "eval_results.json"
    snap.results = load_json(results) if results.is_file() else None
    return snap


class RunFeed:
    """Polls one run. `run_id` follows a recorded run; `run_dir` alone reads a run directory."""

    def __init__(self, *, run_id: str | None = None, run_dir: Path | None = None):
        self.run_id, self.run_dir = run_id, Path(run_dir) if run_dir else None
        self._events: list[dict[str, Any]] = []
        self._provider = None

    @property
    def title(self) -> str:
        return self.run_id or str(self.run_dir)

    def _open(self, record: dict[str, Any]):
        if self._provider is None:
            from ..remote import session

            self._provider = session.open_provider(record["provider"], record.get("provider_config"))
        return self._provider

    def close(self) -> None:
        if self._provider is not None:
            self._provider.close()
            self._provider = None

    def poll(self) -> Snapshot:
        if self.run_id is None:
            return read_run_dir(self.run_dir) if self.run_dir else Snapshot()
        return self._poll_run()

    def _poll_run(self) -> Snapshot:
        from .. import runs
        from ..remote import session, state

        record = session._record(self.run_id)
        output = Path(record.get("output") or "")
        snap = Snapshot(budget=_budget(record))
        if record.get("phase") in state.FINAL_PHASES:
            if output.is_dir():
                read_run_dir(output, snap)
            snap.phase = record["phase"]
            snap.error = record.get("error")
            self.close()
            if (output / session.EVENTS_COPY).is_file():  # the whole log, kept when the run was collected
                self._events = list(runs.logs(self.run_id))
        else:
            provider = self._open(record)
            status = runs.status(self.run_id, provider=provider)
            snap.phase = str(status["job"].get("state") or record.get("phase"))
            snap.checkpoints = status["checkpoints"]
            try:  # the events after those already read (the log is only appended to)
                fresh = list(runs.logs(self.run_id, provider=provider))[len(self._events):]
            except StatesetError:  # a provider that serves no log: curves come with the collected run
                fresh = []
            self._events.extend(fresh)
            for event in self._events:
                if event.get("type") == "metrics" and isinstance(event.get("metrics"), dict):
                    _add_metrics(snap, {"step": event.get("step"), **event["metrics"]})
                elif event.get("type") == "progress" and isinstance(event.get("total"), int):
                    snap.budget = event["total"]
        snap.logs = [_event_line(e) for e in self._events if e.get("type") != "metrics"]
        return snap


def _budget(record: dict[str, Any]) -> int | None:
    from ..core.jsonio import load_json

    plan = Path(record.get("workspace") or "") / "plan.json"
    if not plan.is_file():
        return None
    steps = ((load_json(plan).get("config") or {}).get("training") or {}).get("steps")
    return steps if isinstance(steps, int) else None


def results_rows(results: dict[str, Any], limit: int | None = None) -> list[dict[str, Any]]:
    """The held-out cases, worst regression first: id, base score, adapter score, difference."""
    rows = []
    for case in results.get("cases") or []:
        base, cand = (case.get("base") or {}).get("score"), (case.get("candidate") or {}).get("score")
        diff = case.get("difference")
        if diff is None and isinstance(base, (int, float)) and isinstance(cand, (int, float)):
            diff = cand - base
        rows.append({"id": case.get("id"), "base": base, "candidate": cand, "difference": diff})
    rows.sort(key=lambda r: (r["difference"] if isinstance(r["difference"], (int, float)) else 0.0, str(r["id"])))
    return rows[:limit] if limit else rows


def results_summary(results: dict[str, Any]) -> dict[str, Any]:
    totals = results.get("totals") or {}
    stats = results.get("statistics") or {}
    return {"split": results.get("split") or "held-out", "cases": totals.get("cases"),
            "improved": totals.get("improved"), "regressed": totals.get("regressed"),
            "unchanged": totals.get("unchanged"), "base_mean": totals.get("base_mean"),
            "candidate_mean": totals.get("candidate_mean"), "p_value": stats.get("p_value"),
            "interval": stats.get("interval")}
