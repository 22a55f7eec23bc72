"""Quarantine: a run whose learner state may hold a partial update (an exception between backward and the end of
the optimizer step, non-finite gradients, a failed checkpoint write) or a half-loaded checkpoint (a failed late
restore) is recorded in RUN/quarantine.json. While it is there `--resume` is refused and the run is never
deployed, nominated or gated; `--reload` restores the latest complete checkpoint, verified file by file, and moves
the record aside (RUN/quarantine.resolved-TIME.json, with the resolution) so the history is kept.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping

from stateset_agents.core.jsonio import write_json
from stateset_agents.plugin_api.checkpoints import QUARANTINE_FILE, RESOLVED_PREFIX, checkpoint_dirs, quarantine

#: Causes: what went wrong, in the record's "reason".
CAUSES = ("partial_update", "non_finite_gradient", "checkpoint_write", "receipt_write", "restore")


def _stamp(at: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(at))


def failure(cause: str, message: str, *, committed: int, update: int, last_good: int | None,
            run_path: Path | None, **more) -> dict[str, Any]:
    """The failed event's (and manifest's) failure for a quarantine: reason "quarantined", the cause, the
    committed updates ("step", as in every failure), the update that failed, and what to do."""
    where = f"{run_path / QUARANTINE_FILE} records it; " if run_path else ""
    todo = (f"rerun the same command with --reload to restore checkpoint {last_good}, verified, and continue"
            if last_good is not None else "no checkpoint to reload: --overwrite starts over")
    return {"reason": "quarantined", "cause": cause, "quarantined": True,
            "message": f"quarantined ({cause}) at update {update}: {message}. {where}{todo}",
            "step": committed, "update": update, "last_checkpoint_step": last_good, **more}


def record(run_path: Path, cause: str, message: str, *, step: int, last_good: int | None,
           **more) -> dict[str, Any]:
    """Write RUN/quarantine.json atomically: {reason, message, step, last_good_checkpoint, at, ...}."""
    if cause not in CAUSES:
        raise ValueError(f"unknown quarantine cause {cause!r}")
    rec = {"reason": cause, "message": message, "step": step, "last_good_checkpoint": last_good, "at": time.time(),
           **more}
    earlier = quarantine(run_path)  # a reload that failed in turn: the first record is kept inside the new one
    if earlier is not None:
        rec["earlier"] = earlier
    write_json(run_path / QUARANTINE_FILE, rec)
    return rec


def resolve(run_path: Path, resolution: Mapping[str, Any]) -> Path | None:
    """After a verified reload: the record moves aside with the resolution (None when the run was not
    quarantined)."""
    rec = quarantine(run_path)
    if rec is None:
        return None
    at = time.time()
    target = run_path / f"{RESOLVED_PREFIX}{_stamp(at)}.json"
    n = 1
    while target.exists():  # two reloads in one second
        target = run_path / f"{RESOLVED_PREFIX}{_stamp(at)}-{n}.json"
        n += 1
    write_json(target, {**rec, "resolution": {**resolution, "at": at}})
    os.unlink(run_path / QUARANTINE_FILE)  # after the history holds it
    return target


def set_aside_after(run_path: Path, step: int) -> list[str]:
    """Checkpoints later than the one reloaded (incomplete or descended from a partial update) are renamed out of
    the checkpoint list, kept for inspection: RUN/checkpoints/set-aside-TIME-step-K."""
    moved = []
    stamp = _stamp(time.time())
    for path in checkpoint_dirs(run_path):
        if int(path.name.split("-")[1]) > step:
            target = path.with_name(f"set-aside-{stamp}-{path.name}")
            os.replace(path, target)
            moved.append(target.relative_to(run_path).as_posix())
    return moved

