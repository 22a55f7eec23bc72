"""Run control: the operations on remote runs that every face calls (the CLI's `finetune` commands today; the
gateway, the MCP server and the studio later). One implementation each, for every provider:

    list()                                   the runs recorded here, newest first
    status(run_id)                           the record and the provider's view (checkpoints, quarantine, stop)
    logs(run_id, follow=False, offset=0)     the job's events (events.jsonl), following until the job ends
    stop(run_id)                             cooperative: the worker saves a checkpoint and ends "stopped"
    cancel(run_id)                           terminate now, spend booked (`train-remote --cancel`)
    checkpoints(run_id)                      step, committed updates, sha256, validation score
    prepare_resume(run_id, checkpoint, workspace, mode)   a plan that continues the run (see `resume`)

Each takes a run id recorded in the state directory (`remote.state`) and opens the run's provider as recorded.
"""
from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import orjson

from .core.errors import InputError, StatesetError
from .remote import session, state

MODES = session.RESUME_MODES


def _provider(record: dict[str, Any]):
    return session.open_provider(record["provider"], record.get("provider_config"))


def list() -> list[dict[str, Any]]:  # noqa: A001 - the API's name for it
    """Every training run recorded here (chat sessions excluded), newest first, summarised."""
    rows = [r for r in state.all_records() if r.get("kind", "train") == "train"]
    rows.sort(key=lambda r: float(r.get("updated_at") or 0.0), reverse=True)
    return [{"run_id": r["run_id"], "provider": r.get("provider"), "phase": r.get("phase"),
             "spend_usd": r.get("spend_usd"), "max_cost_usd": r.get("max_cost_usd"), "output": r.get("output"),
             "job_id": (r.get("job") or {}).get("job_id"), "resume": r.get("resume"),
             "children": r.get("children") or [], "updated_at": r.get("updated_at")} for r in rows]


def status(run_id: str, provider=None) -> dict[str, Any]:
    """{"record", "job" (the provider's status), "phase", "checkpoints", "quarantined", "stop_requested"}."""
    record = session._record(run_id)
    own = provider is None
    provider = provider or _provider(record)
    try:
        job = provider.status(run_id)
    finally:
        if own:
            provider.close()
    collected = _collected_dir(record)
    quarantined = job.get("quarantined")
    if collected is not None and quarantined is None:
        from .plugin_api.checkpoints import quarantine

        quarantined = quarantine(collected)
    return {"run_id": run_id, "phase": record.get("phase"), "record": record, "job": job,
            "checkpoints": checkpoints(run_id, job=job), "quarantined": quarantined,
            "stop_requested": bool(job.get("stop_requested") or record.get("stop_requested"))}


def _collected_dir(record: dict[str, Any]) -> Path | None:
    out = Path(record.get("output") or "")
    return out if record.get("phase") in ("collected", "stopped") and (out / "remote_receipt.json").is_file() \
        else None


def checkpoints(run_id: str, *, job: dict[str, Any] | None = None, provider=None) -> list[dict[str, Any]]:
    """The run's checkpoints (plugin_api.checkpoints.checkpoint_table rows): from the collected run directory once
    collected, else from the provider's status (the worker's table)."""
    from .plugin_api.checkpoints import checkpoint_table

    record = session._record(run_id)
    collected = _collected_dir(record)
    if collected is not None:
        return checkpoint_table(collected)
    if job is None:
        if provider is not None:
            job = provider.status(run_id)
        else:
            with _provider(record) as own:
                job = own.status(run_id)
    return [dict(row) for row in job.get("checkpoints") or []]  # (`list` is this module's own function)


def _events(data: bytes, carry: bytes) -> tuple[list[dict[str, Any]], bytes]:
    """Whole lines of `carry + data` as events; the unfinished tail is carried to the next read."""
    lines = (carry + data).split(b"\n")
    events = []
    for raw in lines[:-1]:
        if raw.strip():
            try:
                events.append(orjson.loads(raw))
            except orjson.JSONDecodeError:
                events.append({"type": "log", "message": raw.decode("utf-8", "replace"), "unparsed": True})
    return events, lines[-1]


def logs(run_id: str, *, follow: bool = False, offset: int = 0, poll_s: float = 1.0, provider=None,
         sleep: Callable[[float], None] = time.sleep) -> Iterator[dict[str, Any]]:
    """The job's events from byte `offset` of its events.jsonl. With `follow`, waits for more until the job is in
    a final state and its log is read to the end. A job the provider no longer has is read from the copy kept in
    the collected run directory (remote_events.jsonl)."""
    from .remote.cap import FINAL_STATES

    record = session._record(run_id)
    kept = Path(record.get("output") or "") / session.EVENTS_COPY
    if record.get("phase") in state.FINAL_PHASES and kept.is_file():  # the job may be gone: the copy is whole
        yield from _events(kept.read_bytes()[offset:], b"")[0]
        return
    own = provider is None
    provider = provider or _provider(record)
    carry = b""
    try:
        while True:
            try:
                part = provider.logs({"run_id": run_id, "offset": offset})
            except NotImplementedError:
                raise StatesetError(f"{record['provider']} does not serve a run's log (no `logs`), and no copy "
                                    f"was kept in {record.get('output')}") from None
            data = base64.b64decode(part.get("data_b64") or "")
            offset = int(part.get("offset", offset + len(data)))
            events, carry = _events(data, carry)
            yield from events
            if data and not part.get("eof"):
                continue  # more is there already
            if not follow:
                return
            if provider.status(run_id).get("state") in FINAL_STATES:
                # the job is over; read what it wrote after the last read, then stop
                part = provider.logs({"run_id": run_id, "offset": offset})
                events, carry = _events(base64.b64decode(part.get("data_b64") or ""), carry)
                yield from events
                if not part.get("data_b64") or part.get("eof"):
                    return
                offset = int(part["offset"])
                continue
            sleep(poll_s)
    finally:
        if own:
            provider.close()


def stop(run_id: str, *, wait: bool = False, provider=None, poll_s: float = 2.0,
         timeout_s: float = 3600.0, sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Ask the run's worker to save a checkpoint at the next safe boundary and end ("stopped"); nothing is killed.
    With `wait`, waits for the job to end, then collects it (checkpoints included) and books the spend: the
    result's "record" and "checkpoint" (the last one saved) say where it stopped."""
    record = session._record(run_id)
    if record.get("phase") in state.FINAL_PHASES:
        raise InputError(f"run {run_id} is already over (phase {record['phase']}): nothing to stop", field="run_id")
    own = provider is None
    provider = provider or _provider(record)
    try:
        try:
            answer = dict(provider.stop(run_id) or {})
        except NotImplementedError:
            raise StatesetError(f"{record['provider']} cannot stop a run cooperatively; `finetune cancel {run_id}` "
                                "terminates it") from None
        state.update_record(run_id, stop_requested=bool(answer.get("requested")), stop_requested_at=time.time())
        result: dict[str, Any] = {"run_id": run_id, "requested": bool(answer.get("requested")),
                                  "message": answer.get("message")}
        if not wait or not result["requested"]:
            return result
        started = time.monotonic()
        final = provider.status(run_id)
        from .remote.cap import FINAL_STATES

        while final.get("state") not in FINAL_STATES:
            if time.monotonic() - started > timeout_s:
                raise StatesetError(f"run {run_id} did not stop within {timeout_s:.0f}s; it is still "
                                    f"{final.get('state')} (`finetune cancel {run_id}` terminates it)")
            sleep(poll_s)
            final = provider.status(run_id)
        rate = float(final.get("cost_per_hour") or record.get("rate_per_hour") or 0.0)
        spend = max(float(final.get("spend_usd") or 0.0), rate * float(final.get("uptime_s") or 0.0) / 3600.0)
        done = session.finish(run_id, provider, final, spend)
        table = checkpoints(run_id, job=final)
        return {**result, "record": done, "state": final.get("state"), "checkpoint": table[-1] if table else None}
    finally:
        if own:
            provider.close()


def cancel(run_id: str, provider=None) -> dict[str, Any]:
    """Terminate the run's job now (not cooperative) and book what it spent: `train-remote --cancel`."""
    record = session._record(run_id)
    if provider is not None:
        return session.cancel(run_id, provider)
    with _provider(record) as own:
        return session.cancel(run_id, own)


def prepare_resume(run_id: str, checkpoint: int | None, workspace: str | Path, mode: str, *,
                   max_cost: float | None = None, raise_cap: bool = False, provider=None) -> dict[str, Any]:
    """A new plan in `workspace` that continues run `run_id` in one of MODES (`session.prepare_resume`)."""
    prepare = session.prepare_resume
    record = session._record(run_id)
    if provider is not None:
        return prepare(record, checkpoint, Path(workspace), mode, max_cost=max_cost, raise_cap=raise_cap,
                       provider=provider)
    with _provider(record) as own:
        return prepare(record, checkpoint, Path(workspace), mode, max_cost=max_cost, raise_cap=raise_cap,
                       provider=own)
