"""The flows the CLI drives: prepare, launch, watch, attach, cancel, collect, orphans. Provider-independent.

Every flow that can rent something checks the cap first and takes the run's lock around look-up-then-create.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.errors import InputError, StatesetError
from ..plugin_api.jobs import bundle
from . import config as cfg
from . import state
from .artifacts import collect
from .cap import FINAL_STATES, Watchdog, check_cap_value, enforce_cap
from .plan import load_verified, snapshot_inputs, write_plan


def open_provider(name: str, provider_config: Mapping[str, Any] | None = None):
    from ..core.runtimes import load_component

    return load_component(f"provider:{name}", config=dict(provider_config or {}))


def quote_request(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: config.get(k) for k in ("gpu", "gpus", "max_hours", "storage_gb", "image", "base_model",
                                       "algorithm", "training")}


def prepare(config: Mapping[str, Any], workspace: Path, provider) -> dict[str, Any]:
    """Quote, refuse above the cap, then snapshot and write the plan (nothing is written before the quote)."""
    full = cfg.validated(config)
    if "max_cost_usd" not in full:
        raise InputError("a cap is required: --max-cost USD (or max_cost_usd in the config)", field="max_cost_usd")
    cap = check_cap_value(full["max_cost_usd"])
    quote = provider.quote(quote_request(full))  # a missing API key fails here, before any file is written
    worst = enforce_cap(quote, full["gpus"], full["max_hours"], cap)
    inputs = snapshot_inputs(full, workspace)
    return write_plan(workspace, full, inputs, gpu_id=quote["gpu"], image=quote.get("image") or {},
                      quote=quote, worst_case_usd=worst)


def launch(workspace: Path, provider, *, output: Path | None = None) -> dict[str, Any]:
    """Create the job, or attach to the one this plan already created. Returns the run record."""
    plan = load_verified(workspace)
    run_id = plan["run_id"]
    cap = check_cap_value(plan["max_cost_usd"])
    fresh = provider.quote(quote_request(plan["config"]))  # prices move: the cap holds at launch time, too
    enforce_cap(fresh, plan["gpu"]["count"], plan["max_hours"], cap)
    with state.run_lock(run_id):
        record = state.load_record(run_id) or {}
        job = provider.launch({**plan, "bundle": bundle(Path(workspace), plan)})
        return state.save_record({
            **record, "run_id": run_id, "provider": plan["provider"],
            "provider_config": plan["config"].get("provider_config") or {}, "workspace": str(workspace),
            "output": str(output or record.get("output") or Path("runs") / run_id), "plan_checksum": plan["checksum"],
            "max_cost_usd": cap, "rate_per_hour": fresh["usd_per_gpu_hour"] * plan["gpu"]["count"],
            "job": job, "phase": "running", "attached": bool(job.get("attached")),
        })


def watch(run_id: str, provider, *, clock: Callable[[], float] = time.time,
          sleep: Callable[[float], None] = time.sleep, poll_s: float = 15.0,
          on_tick: Callable[[dict], None] | None = None) -> dict[str, Any]:
    """Watch until the job ends (terminating it at the cap or the deadline), collect, and book the spend."""
    record = _record(run_id)
    job = record["job"]
    dog = Watchdog(provider, run_id, record["max_cost_usd"], float(job["deadline_at"]),
                   float(record.get("rate_per_hour") or 0.0), clock=clock, sleep=sleep, poll_s=poll_s,
                   on_tick=on_tick)
    final = dog.run()
    return finish(run_id, provider, final, dog.spend)


def finish(run_id: str, provider, final: Mapping[str, Any], spend: float) -> dict[str, Any]:
    record = _record(run_id)
    phase, error = final.get("state"), None
    if phase == "succeeded":
        try:
            collect(provider, run_id, Path(record["output"]),
                    extra={"provider": record["provider"], "plan_checksum": record["plan_checksum"],
                           "spend_usd": round(spend, 6)})
            phase = "collected"
        except StatesetError as exc:
            phase, error = "failed", str(exc)
    elif final.get("stopped_by"):
        phase = "capped" if final["stopped_by"] == "cap" else "failed"
        error = f"terminated by the watchdog ({final['stopped_by']})"
    else:
        phase, error = "failed", final.get("message") or f"the job ended in state {final.get('state')}"
    provider.terminate(run_id)  # a finished pod that still serves its artifacts costs money: release it
    # a provider that bills usage reports the final bill only once the job is over (River: tokens)
    spend = max(spend, float(provider.status(run_id).get("spend_usd") or 0.0))
    state.append_ledger({"run_id": run_id, "kind": record.get("kind", "train"), "provider": record["provider"],
                         "job_id": (record.get("job") or {}).get("job_id"), "spend_usd": round(spend, 6),
                         "max_cost_usd": record["max_cost_usd"], "outcome": phase, "message": error})
    return state.update_record(run_id, phase=phase, spend_usd=round(spend, 6), error=error, final=dict(final))


def attach(run_id: str, provider=None, **watch_options: Any) -> dict[str, Any]:
    """Reattach to a running job or collect a finished one. Never starts a job."""
    record = _record(run_id)
    if record.get("phase") in state.FINAL_PHASES:
        return record
    provider = provider or open_provider(record["provider"], record.get("provider_config"))
    return watch(run_id, provider, **watch_options)


def cancel(run_id: str, provider=None) -> dict[str, Any]:
    record = _record(run_id)
    provider = provider or open_provider(record["provider"], record.get("provider_config"))
    status = provider.status(run_id)
    provider.terminate(run_id)
    rate = float(status.get("cost_per_hour") or record.get("rate_per_hour") or 0.0)
    spend = max(float(status.get("spend_usd") or 0.0), rate * float(status.get("uptime_s") or 0.0) / 3600.0)
    state.append_ledger({"run_id": run_id, "kind": record.get("kind", "train"), "provider": record["provider"],
                         "job_id": (record.get("job") or {}).get("job_id"), "spend_usd": round(spend, 6),
                         "max_cost_usd": record.get("max_cost_usd"), "outcome": "cancelled"})
    return state.update_record(run_id, phase="cancelled", spend_usd=round(spend, 6))


def _record(run_id: str) -> dict[str, Any]:
    record = state.load_record(run_id)
    if record is None:
        raise InputError(f"no run {run_id!r} is known here (runs are recorded in {state.state_dir()})",
                         field="run_id")
    return record


def orphans(providers: Mapping[str, Any], now: float | None = None) -> list[dict[str, Any]]:
    """Live jobs labelled as ours that nobody is responsible for: no local record, a record that says the run is
    over, or a job past its deadline."""
    now = time.time() if now is None else now
    found = []
    for name, provider in providers.items():
        for job in provider.list_jobs():
            if job.get("state") in FINAL_STATES:
                continue
            record = state.load_record(job["run_id"]) or {}
            deadline = float(((record.get("job") or {}).get("deadline_at")) or job.get("deadline_at") or 0.0)
            why = ("no local record" if not record else
                   f"run is {record['phase']}" if record.get("phase") in state.FINAL_PHASES else
                   "past its deadline" if deadline and now > deadline else None)
            if why:
                found.append({**job, "provider": name, "why": why})
    return found


def clean_orphans(providers: Mapping[str, Any], now: float | None = None) -> list[dict[str, Any]]:
    cleaned = []
    for job in orphans(providers, now):
        providers[job["provider"]].terminate(job["run_id"])
        spend = float(job.get("cost_per_hour") or 0.0) * float(job.get("uptime_s") or 0.0) / 3600.0
        state.append_ledger({"run_id": job["run_id"], "kind": "orphan", "provider": job["provider"],
                             "job_id": job.get("job_id"), "spend_usd": round(spend, 6), "outcome": "terminated",
                             "message": job["why"]})
        cleaned.append(job)
    return cleaned
