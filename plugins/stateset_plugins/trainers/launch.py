"""`train --nproc N`: the run's N ranks under torch's own launcher (``python -m torch.distributed.run``, i.e.
torchrun, ``--standalone``), and rank 0's events relayed to the caller.

The parent writes the request to a private directory and starts torchrun in its own session (a terminal's Ctrl-C
reaches the parent, which asks the ranks to stop cooperatively: a STOP file every rank hears of through the
engine's stop agreement, so they finish the update and save a checkpoint). Each rank runs `rank.main`: the
process group from torchrun's environment, then `run.train_run` with that world; rank 0 appends its events to
``events-0.jsonl``, another rank only its failure. A run whose rank 0 ended without a
final event (a rank crashed and torchrun stopped the others) is reported failed with the launcher's log tail.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

FINAL = ("completed", "failed")


def torchrun_command(nproc: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "stateset_plugins.trainers.rank", *args]


def _environment(nproc: int, device: str) -> dict[str, str]:
    env = dict(os.environ)
    # the cores split between the ranks (torchrun would set 1 and warn); a caller's OMP_NUM_THREADS wins
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    if device == "cpu":
        env["STATESET_DDP_DEVICE"] = "cpu"  # gloo even where a GPU is present
    return env


def run_distributed(request: Mapping[str, Any], nproc: int, stop: threading.Event | None,
                    device: str) -> Iterator[dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="stateset-ddp-"))
    try:
        (work / "request.json").write_text(json.dumps(dict(request), default=str))
        log = open(work / "torchrun.log", "wb")
        proc = subprocess.Popen(torchrun_command(nproc, str(work)), stdout=log, stderr=subprocess.STDOUT,
                                env=_environment(nproc, device), start_new_session=True)
        yield {"type": "log", "message": f"launched {nproc} processes with torchrun (torch.distributed, "
                                         f"{'gloo' if device == 'cpu' else 'NCCL on GPU, gloo on CPU'})"}
        last: dict[str, Any] = {}
        try:
            with open(work / "events-0.jsonl", "a+b") as events:
                events.seek(0)
                while True:
                    done = proc.poll() is not None
                    for event in _read_new(events):
                        last = event
                        yield event
                    if done:
                        break
                    if stop is not None and stop.is_set():
                        (work / "STOP").touch()
                    time.sleep(0.1)
        finally:
            if proc.poll() is None:  # the caller went away: the ranks stop at the next update, then go
                (work / "STOP").touch()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=60)
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
            log.close()
        if last.get("type") not in FINAL:
            yield _rank_failure(work, proc.returncode)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _read_new(events) -> Iterator[dict[str, Any]]:
    while True:
        at = events.tell()
        line = events.readline()
        if not line.endswith(b"\n"):  # a line still being written: read it whole next time
            events.seek(at)
            return
        yield json.loads(line)


def _rank_failure(work: Path, code: int | None) -> dict[str, Any]:
    for path in sorted(work.glob("events-*.jsonl")):
        for line in reversed(path.read_bytes().splitlines()):
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("type") == "failed":
                    return {**event, "message": f"rank {path.stem.split('-')[1]}: {event.get('message')}"}
    tail = (work / "torchrun.log").read_text(errors="replace")[-3000:] if (work / "torchrun.log").exists() else ""
    return {"type": "failed", "reason": "rank_failed",
            "message": f"a rank ended without a final event (torchrun exit {code}); the last checkpoint is kept. "
                       f"torchrun's log ends:\n{tail}"}
