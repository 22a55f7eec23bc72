"""The process a gateway training job runs in: ``python -m stateset_agents.gateway.job_worker --database URL
--job ID --token T``. It takes the job from the database (a conditional UPDATE from the claim its gateway made:
a second worker for the same job finds it taken and exits), runs the trainer as `stateset-agents train` does (the
`trainer:ALGO` component in process, the same request), appends every event to JOB_DIR/events.jsonl, keeps the
row's metrics current, and writes the final state. It is started in its own session, so a gateway that dies (even
by SIGKILL) leaves it running; the restarted gateway reattaches to it by its pid.

Stop is cooperative, as the run-control `stop`: the file `plugin_api.jobs.STOP_FILE` in the job directory makes
the trainer finish its current update, save a full checkpoint and end ("stopped").
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..core.jsonio import dumps_line
from .db import Database, encode

FINAL = ("succeeded", "stopped", "failed", "cancelled")


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks (/proc/PID/stat field 22): with the pid, who it is."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def run_train(db: Database, job: dict[str, Any]) -> tuple[str, str]:
    from ..pipeline.training import resolve_trainer, run_training
    from ..plugin_api.jobs import STOP_FILE

    job_dir = Path(job["job_dir"])
    request = dict(job["request"]["train"])
    spec = resolve_trainer(request.pop("algorithm"))
    last: dict[str, Any] = {}
    metrics: dict[str, Any] = {}

    def on_stop_file(cancel):  # `POST .../stop` writes STOP_FILE: the trainer's cooperative stop
        done = threading.Event()

        def watch_stop():
            while not done.wait(0.25):
                if (job_dir / STOP_FILE).exists():
                    cancel()
                    return

        threading.Thread(target=watch_stop, daemon=True).start()
        return done.set

    stamp = 0.0
    with open(job_dir / "events.jsonl", "ab") as events:
        for event in run_training(spec, request, bind_cancel=on_stop_file):
            last = event
            events.write(dumps_line(event))
            events.flush()
            kind = event.get("type")
            if kind == "progress":
                metrics.update(step=event.get("step"), total=event.get("total"))
            elif kind == "metrics":
                metrics.update(step=event.get("step"), last=event.get("metrics"))
            if kind in ("progress", "metrics") and time.monotonic() - stamp > 0.5:
                stamp = time.monotonic()
                db.execute("UPDATE jobs SET metrics = ?, updated_at = ? WHERE id = ?",
                           (encode(metrics), time.time(), job["id"]))
    db.execute("UPDATE jobs SET metrics = ? WHERE id = ?", (encode(metrics), job["id"]))
    if last.get("type") == "completed":
        return "succeeded", "completed"
    if last.get("reason") == "interrupted" and (job_dir / STOP_FILE).exists():
        return "stopped", last.get("message") or "stopped at a checkpoint"
    return "failed", last.get("message") or "the run ended without completing"


def run_remote(db: Database, job: dict[str, Any]) -> tuple[str, str]:
    """A train-remote plan (prepared, quoted and capped by the gateway): launched as `train-remote` launches it,
    watched under the cap and collected (`remote.session.watch`), its events mirrored from `runs.logs`."""
    from .. import runs
    from ..remote import session

    job_dir = Path(job["job_dir"])
    spec = job["request"]
    provider = session.open_provider(spec["provider"], spec.get("provider_config"))
    try:
        launched = session.launch(job_dir / "workspace", provider, output=job_dir / "run")
        run_id = launched["run_id"]
        db.execute("UPDATE jobs SET run_id = ?, updated_at = ? WHERE id = ?", (run_id, time.time(), job["id"]))

        def mirror():  # its own provider: the watch below uses the other from this thread
            try:
                with session.open_provider(spec["provider"], spec.get("provider_config")) as own, \
                        open(job_dir / "events.jsonl", "ab") as events:
                    for event in runs.logs(run_id, follow=True, provider=own, poll_s=0.5):
                        events.write(dumps_line(event))
                        events.flush()
            except Exception as exc:  # the log is a view; the watch decides the outcome
                print(f"event mirror stopped: {type(exc).__name__}: {exc}", flush=True)

        thread = threading.Thread(target=mirror, daemon=True)
        thread.start()
        record = session.watch(run_id, provider, poll_s=1.0)
        thread.join(30)
    finally:
        provider.close()
    phase = record.get("phase")
    state = {"collected": "succeeded", "stopped": "stopped", "cancelled": "cancelled"}.get(phase, "failed")
    return state, record.get("error") or f"remote run {run_id} {phase} (spend {record.get('spend_usd')} USD)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stateset_agents.gateway.job_worker")
    parser.add_argument("--database", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--token", required=True)
    args = parser.parse_args(argv)
    db = Database(args.database)
    pid = os.getpid()
    taken = db.execute("UPDATE jobs SET state = 'running', pid = ?, pid_start = ?, attempts = attempts + 1, "
                       "updated_at = ? WHERE id = ? AND claimed_by = ? AND state = 'starting'",
                       (pid, process_start(pid), time.time(), args.job, args.token))
    if taken != 1:
        print(f"job {args.job} is not this worker's to run (claimed by another, or no longer starting)")
        return 0
    job = db.one("SELECT * FROM jobs WHERE id = ?", (args.job,))
    try:
        state, message = (run_remote if job["kind"] == "train-remote" else run_train)(db, job)
    except Exception as exc:  # recorded as the job's failure; the traceback is in worker.log
        import traceback

        traceback.print_exc()
        state, message = "failed", f"{type(exc).__name__}: {exc}"
    db.execute("UPDATE jobs SET state = ?, message = ?, updated_at = ? WHERE id = ? AND state = 'running'",
               (state, message, time.time(), args.job))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
