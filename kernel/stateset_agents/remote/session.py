"""The flows the CLI drives: prepare, launch, watch, attach, cancel, collect, orphans. Provider-independent.

Every flow that can rent something checks the cap first and takes the run's lock around look-up-then-create. A
launch is recorded (phase "launching", with the plan checksum) before the provider is asked to create the job, so
a client that dies before it hears back leaves a record the next `prepare`, `train-remote` or `launch` resolves
by asking the provider: it finds the job and attaches (never a second paid run), or finds none and launches.
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
from .plan import copy_inputs, job_identity, load_verified, snapshot_checkpoint, snapshot_inputs, write_plan

#: `finetune prepare-resume`'s modes, by the names help and output use; one never becomes another
RESUME_MODES = {"exact": "exact continuation", "weights": "weights only", "same-settings": "same settings"}


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
    if full.get("salt"):  # --new-run: never beside a sibling whose job may be live or whose launch is unconfirmed
        refuse_live_sibling(job_identity(full, inputs, gpu_id=quote["gpu"],
                                         image_digest=(quote.get("image") or {}).get("digest")), provider)
    plan = write_plan(workspace, full, inputs, gpu_id=quote["gpu"], image=quote.get("image") or {},
                      quote=quote, worst_case_usd=worst)
    found = confirm_launch(plan["run_id"], provider)
    return {**plan, "_notice": found["notice"]} if found else plan


def refuse_live_sibling(identity: str, provider) -> None:
    """Refuse --new-run while a run of the same job is live or its launch unconfirmed (naming it)."""
    for record in state.all_records():
        if record.get("job_identity") != identity or record.get("phase") not in state.LIVE_PHASES:
            continue
        if record.get("phase") == "launching":
            confirm_launch(record["run_id"], provider)
            record = state.load_record(record["run_id"]) or record
            if record.get("phase") not in state.LIVE_PHASES:
                continue
        elif provider.status(record["run_id"]).get("state") in FINAL_STATES:
            continue  # recorded as running by a client that detached, but the job is over
        job = (record.get("job") or {}).get("job_id")
        why = ("its launch was not confirmed" if record["phase"] == "launching" else
               f"its job {job} may still be running")
        raise InputError(f"refusing --new-run: run {record['run_id']} of the same job exists and {why}; follow it "
                         f"with `train-remote --attach {record['run_id']}` or end it with `finetune cancel "
                         f"{record['run_id']}` first", field="new_run")


def confirm_launch(run_id: str, provider) -> dict[str, Any] | None:
    """Resolve a launch a client recorded but never confirmed: ask the provider. Finding the job, the record is
    attached to it (with a notice saying so) and returned; finding none, the launch is marked not made (None)."""
    with state.run_lock(run_id):
        record = state.load_record(run_id)
        if not record or record.get("phase") != "launching":
            return None
        status = provider.status(run_id)
        if status.get("state") in (None, "missing"):
            state.update_record(run_id, phase="not_launched", error="the launch was never confirmed and the "
                                "provider has no job for this run")
            return None
        job_id = status.get("job_id") or run_id
        notice = f"found the existing job {job_id} for run {run_id} (its launch was not confirmed)"
        job = {"job_id": job_id, "created_at": status.get("created_at") or record.get("launching_at"),
               "deadline_at": status.get("deadline_at") or record.get("deadline_at"), "attached": True}
        return state.save_record({**record, "job": job, "phase": "running", "attached": True, "notice": notice})


def booked_spend(record: Mapping[str, Any]) -> float:
    """What a run spent as booked: its record's spend or its ledger lines, whichever is higher."""
    ledger = sum(float(r.get("spend_usd") or 0.0) for r in state.read_ledger()
                 if r.get("run_id") == record["run_id"] and r.get("kind", "train") == "train")
    return max(float(record.get("spend_usd") or 0.0), ledger)


def _base_model_matches(planned: Any, recorded: Mapping[str, Any]) -> bool:
    """The plan's base model (a hub id or a path, as given) is the one the checkpoint's run loaded."""
    if not recorded:
        return planned is None
    if planned is None:
        return False
    names = {str(recorded.get(k)) for k in ("id", "path", "name") if recorded.get(k)}
    return str(planned) in names or str(Path(str(planned)).expanduser().resolve()) in names


def _resume_checkpoint(parent: Mapping[str, Any], step: int, mode: str) -> tuple[Path, dict[str, Any]]:
    """The parent's collected checkpoint `step`, verified for `mode` (exact: the complete learner state)."""
    from ..plugin_api.checkpoints import LEARNER_STATE, checkpoint_table, verify_checkpoint

    out = Path(parent.get("output") or "")
    if parent.get("phase") not in ("stopped", "collected") or not (out / "remote_receipt.json").is_file():
        raise InputError(f"run {parent['run_id']} has no collected checkpoints here (phase {parent.get('phase')}): "
                         f"{RESUME_MODES[mode]} needs them in its run directory", field="run_id")
    rows = {r["step"]: r for r in checkpoint_table(out)}
    if step not in rows:
        raise InputError(f"run {parent['run_id']} has no checkpoint at step {step} (it has "
                         f"{sorted(rows) or 'none'})", path=str(out / "checkpoints"), field="checkpoint")
    path = out / rows[step]["path"]
    identity = verify_checkpoint(path, require=LEARNER_STATE if mode == "exact" else ("adapter",))
    return path, {**identity, "sha256": rows[step]["sha256"]}


def _child_cap(parent: Mapping[str, Any], max_cost: float | None, raise_cap: bool) -> tuple[float, str]:
    """(cap, where it comes from): the parent's cap less its booked spend, unless --raise-cap lets more."""
    remainder = round(float(parent["max_cost_usd"]) - booked_spend(parent), 6)
    if max_cost is None:
        if remainder <= 0:
            raise InputError(f"no budget remains: run {parent['run_id']} spent ${booked_spend(parent):.4f} of its "
                             f"${float(parent['max_cost_usd']):.2f} cap; give --max-cost USD with --raise-cap to "
                             "spend more", field="max_cost_usd")
        return remainder, f"the parent's remaining budget (${parent['max_cost_usd']:.2f} cap less "                           f"${booked_spend(parent):.4f} spent)"
    cap = check_cap_value(max_cost)
    if cap > remainder and not raise_cap:
        raise InputError(f"--max-cost ${cap:.2f} is above the parent's remaining budget ${max(remainder, 0):.4f} "
                         f"(${float(parent['max_cost_usd']):.2f} cap less ${booked_spend(parent):.4f} spent); add "
                         "--raise-cap to spend more than the parent's cap allowed", field="max_cost_usd")
    return cap, ("raised above the parent's remaining budget by --raise-cap" if cap > remainder else
                 "--max-cost, within the parent's remaining budget")


def prepare_resume(parent: dict[str, Any], step: int | None, workspace: Path, mode: str, *, provider,
                   max_cost: float | None = None, raise_cap: bool = False) -> dict[str, Any]:
    """A plan in `workspace` that continues `parent` (a run record): "exact" continues from checkpoint `step`'s
    whole learner state (the parent stopped, code, model and data identical), "weights" starts a new run from its
    adapter, "same-settings" runs the parent's settings afresh. Refuses rather than falling back to another mode."""
    if mode not in RESUME_MODES:
        raise InputError(f"--mode must be one of {', '.join(f'{k} ({v})' for k, v in RESUME_MODES.items())}, got "
                         f"{mode!r}", field="mode")
    name = RESUME_MODES[mode]
    run_id = parent["run_id"]
    parent_ws = Path(parent.get("workspace") or "")
    parent_plan = load_verified(parent_ws)
    if mode == "exact" and parent.get("phase") != "stopped":
        raise InputError(f"{name} refused: run {run_id} is {parent.get('phase')}, not stopped (an exact "
                         f"continuation continues a run `finetune stop` ended; weights only or same settings start "
                         "a new run from it)", field="run_id")
    if mode == "same-settings" and step is not None:
        raise InputError("same settings starts from the base model: --checkpoint is used only by exact "
                         "continuation and weights only", field="checkpoint")
    if mode != "same-settings" and step is None:
        raise InputError(f"{name} needs --checkpoint STEP (see `finetune checkpoints {run_id}`)", field="checkpoint")
    cap, cap_source = _child_cap(parent, max_cost, raise_cap)
    config = {**parent_plan["config"], "max_cost_usd": cap}
    quote = provider.quote(quote_request(config))
    resume: dict[str, Any] = {"mode": mode, "parent_run_id": run_id, "checkpoint_step": step,
                              "checkpoint_sha256": None}
    checkpoint = None
    if step is not None:
        checkpoint, identity = _resume_checkpoint(parent, int(step), mode)
        resume.update(checkpoint_sha256=identity["sha256"], code=identity.get("code") or {})
        problems = []
        dataset = parent_plan["inputs"]["dataset"]["sha256"]
        if mode == "exact" and identity.get("dataset_sha256") not in (None, dataset):
            problems.append(f"dataset sha256 {str(identity['dataset_sha256'])[:12]}... (the plan's {dataset[:12]}...)")
        if mode == "exact" and identity.get("algorithm") not in (None, config.get("algorithm")):
            problems.append(f"algorithm {identity['algorithm']} (the plan's {config.get('algorithm')})")
        if not _base_model_matches(config.get("base_model"), identity.get("base_model") or {}):
            problems.append(f"base model {identity.get('base_model')} (the plan's {config.get('base_model')})")
        image = (quote.get("image") or {}).get("digest")
        if mode == "exact" and image != (parent_plan.get("image") or {}).get("digest"):
            problems.append(f"trainer code: the image is now {image}, the parent ran "
                            f"{(parent_plan.get('image') or {}).get('digest')} (stateset-agents and trainer versions)")
        if problems:
            raise InputError(f"{name} refused: checkpoint {step} of run {run_id} differs from the parent's plan: "
                             + "; ".join(problems), path=str(checkpoint), field="checkpoint")
    worst = enforce_cap(quote, config["gpus"], config["max_hours"], cap)
    inputs = copy_inputs(parent_ws, parent_plan, workspace)
    if checkpoint is not None:
        resume["checkpoint_dir"], ckpt_inputs = snapshot_checkpoint(
            checkpoint, workspace, records=checkpoint.parent.parent if mode == "exact" else None)
        inputs.update(ckpt_inputs)
    plan = write_plan(workspace, {**config, "resume": resume}, inputs, gpu_id=quote["gpu"],
                      image=quote.get("image") or {}, quote=quote, worst_case_usd=worst)
    with state.run_lock(run_id):
        current = state.load_record(run_id) or parent
        children = [c for c in current.get("children") or [] if c.get("run_id") != plan["run_id"]]
        children.append({"run_id": plan["run_id"], "mode": mode, "checkpoint_step": step,
                         "workspace": str(workspace)})
        state.save_record({**current, "children": children})
    return {**plan, "_mode_name": name, "_cap_source": cap_source}


def launch(workspace: Path, provider, *, output: Path | None = None) -> dict[str, Any]:
    """Create the job, or attach to the one this plan already created. Returns the run record."""
    plan = load_verified(workspace)
    run_id = plan["run_id"]
    cap = check_cap_value(plan["max_cost_usd"])
    fresh = provider.quote(quote_request(plan["config"]))  # prices move: the cap holds at launch time, too
    enforce_cap(fresh, plan["gpu"]["count"], plan["max_hours"], cap)
    if plan["config"].get("salt") and plan.get("job_identity"):
        refuse_live_sibling(plan["job_identity"], provider)
    found = confirm_launch(run_id, provider)
    if found:
        return found
    with state.run_lock(run_id):
        record = state.load_record(run_id) or {}
        base = {
            **record, "run_id": run_id, "provider": plan["provider"],
            "provider_config": plan["config"].get("provider_config") or {}, "workspace": str(workspace),
            "output": str(output or record.get("output") or Path("runs") / run_id), "plan_checksum": plan["checksum"],
            "max_cost_usd": cap, "rate_per_hour": fresh["usd_per_gpu_hour"] * plan["gpu"]["count"],
            "job_identity": plan.get("job_identity"), "resume": plan.get("resume"),
            "deadline_at": plan["created_at"] + plan["max_hours"] * 3600,
        }
        if record.get("phase") not in state.LIVE_PHASES:  # before the provider is asked: a trace if we die
            state.save_record({**base, "phase": "launching", "launching_at": time.time()})
        job = provider.launch({**plan, "bundle": bundle(Path(workspace), plan)})
        return state.save_record({**base, "job": job, "phase": "running", "attached": bool(job.get("attached")),
                                  "notice": None})


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
    with state.run_lock(run_id):  # `finetune stop` and a watching `train-remote` may both get here: once
        record = _record(run_id)
        if record.get("phase") in state.FINAL_PHASES:
            return record
        return _finish(record, provider, final, spend)


def _finish(record: dict[str, Any], provider, final: Mapping[str, Any], spend: float) -> dict[str, Any]:
    run_id = record["run_id"]
    phase, error = final.get("state"), None
    if phase in ("succeeded", "stopped"):  # a stopped run's checkpoints come back like a finished run's files
        try:
            collect(provider, run_id, Path(record["output"]),
                    extra={"provider": record["provider"], "plan_checksum": record["plan_checksum"],
                           "spend_usd": round(spend, 6), "resume": record.get("resume")})
            phase = "collected" if phase == "succeeded" else "stopped"
        except StatesetError as exc:
            phase, error = "failed", str(exc)
    elif final.get("stopped_by"):
        phase = "capped" if final["stopped_by"] == "cap" else "failed"
        error = f"terminated by the watchdog ({final['stopped_by']})"
    else:
        phase, error = "failed", final.get("message") or f"the job ended in state {final.get('state')}"
    save_events(provider, run_id, Path(record["output"]))  # before the terminate: a pod's log goes with it
    provider.terminate(run_id)  # a finished pod that still serves its artifacts costs money: release it
    # a provider that bills usage reports the final bill only once the job is over (River: tokens)
    spend = max(spend, float(provider.status(run_id).get("spend_usd") or 0.0))
    state.append_ledger({"run_id": run_id, "kind": record.get("kind", "train"), "provider": record["provider"],
                         "job_id": (record.get("job") or {}).get("job_id"), "spend_usd": round(spend, 6),
                         "max_cost_usd": record["max_cost_usd"], "outcome": phase, "message": error})
    return state.update_record(run_id, phase=phase, spend_usd=round(spend, 6), error=error, final=dict(final))


EVENTS_COPY = "remote_events.jsonl"  # beside remote_receipt.json: the job's log, kept once the job is gone


def save_events(provider, run_id: str, output: Path) -> None:
    """Keep the job's events.jsonl in the run directory (providers without `logs`: nothing to keep)."""
    import base64

    from ..core.jsonio import atomic_write

    chunks, offset = [], 0
    try:
        while True:
            part = provider.logs({"run_id": run_id, "offset": offset})
            data = base64.b64decode(part.get("data_b64") or "")
            chunks.append(data)
            offset = int(part.get("offset") or offset + len(data))
            if part.get("eof") or not data:
                break
    except (NotImplementedError, StatesetError):
        return
    if output.is_dir():
        with atomic_write(output / EVENTS_COPY) as f:
            f.write(b"".join(chunks))


def attach(run_id: str, provider=None, **watch_options: Any) -> dict[str, Any]:
    """Reattach to a running job or collect a finished one. Never starts a job."""
    record = _record(run_id)
    if record.get("phase") in state.FINAL_PHASES:
        return record
    provider = provider or open_provider(record["provider"], record.get("provider_config"))
    if record.get("phase") in ("launching", "not_launched") and not confirm_launch(run_id, provider):
        raise StatesetError(f"run {run_id} was never launched: its launch was not confirmed and "
                            f"{record['provider']} has no job for it; launch it with `finetune launch "
                            f"{record.get('workspace')}`")
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
    over, a launch that failed before it was confirmed (nobody holds the run's lock: a retry would attach), or a
    job past its deadline."""
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
                   "its launch failed before it was confirmed (`finetune launch` again attaches to it)"
                   if record.get("phase") in ("launching", "not_launched") and not state.run_locked(job["run_id"])
                   else "past its deadline" if deadline and now > deadline else None)
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
