"""Helpers every provider shares: credentials, quote shape, image pinning, artifact slices."""
from __future__ import annotations

import base64
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from stateset_agents.core.errors import InputError
from stateset_agents.plugin_api.jobs import STOP_FILE

NAME_PREFIX = "stateset-"  # every remote resource is named stateset-<run id>


def require_env(*names: str, how: str) -> str:
    """The first variable's value; a clear error naming the variables when none is set."""
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    raise InputError(f"{' or '.join(names)} is not set: {how}", field=names[0])


def resource_name(run_id: str) -> str:
    return f"{NAME_PREFIX}{run_id}"


def run_id_of(name: str) -> str | None:
    return name[len(NAME_PREFIX):] if name and name.startswith(NAME_PREFIX + "sa-") else None


PINNED = re.compile(r"[^\s@]+@sha256:[0-9a-f]{64}")
IMAGE_HOW = ("pass --image NAME@sha256:DIGEST (or `image` in the config), or build the trainer image, push it and "
             "record its registry digest: `stateset-agents images build trainer`, `docker push`, then "
             "`stateset-agents images pin trainer`")


def image_of(image: str | None) -> dict[str, Any]:
    """The quote's image: NAME@sha256:DIGEST split, or {"ref", "problem"} saying what is wrong. A quote never needs
    the image (the price does not depend on it); the kernel refuses a problem after it has shown the quote."""
    if image and PINNED.fullmatch(image):
        name, _, digest = image.partition("@")
        return {"name": name, "digest": digest, "ref": image}
    why = "no trainer image" if not image else f"the trainer image {image!r} is not pinned by digest"
    return {"ref": image, "problem": f"{why}: remote jobs run an image pinned by digest (a tag can move under a run "
                                     f"id); {IMAGE_HOW}"}


def pinned_image(image: Mapping[str, Any] | str | None) -> str:
    """The NAME@sha256:DIGEST a job runs; InputError when the plan holds none (checked again at launch)."""
    found = image_of(image.get("ref") if isinstance(image, Mapping) else image)
    if "problem" in found:
        raise InputError(found["problem"], field="image")
    return found["ref"]


def quote(provider: str, gpu: str, usd_per_gpu_hour: float | None, *, source: str, storage_usd: float = 0.0,
          image: Mapping[str, str] | None = None, reason: str | None = None, **extra: Any) -> dict[str, Any]:
    now = time.time()
    priced = usd_per_gpu_hour is not None and usd_per_gpu_hour >= 0
    return {"provider": provider, "gpu": gpu, "priced": priced, "usd_per_gpu_hour": usd_per_gpu_hour,
            "storage_usd": round(storage_usd, 6), "source": source, "quoted_at": now,
            "quoted_at_iso": datetime.fromtimestamp(now, timezone.utc).isoformat(), "currency": "USD",
            "image": dict(image or {}), **({"reason": reason} if reason else {}), **extra}


def deadline_for(plan: Mapping[str, Any], created_at: float) -> float:
    return created_at + float(plan["max_hours"]) * 3600.0


def read_slice(root: Path, request: Mapping[str, Any]) -> dict[str, Any]:
    """A ranged read of one file under root (paths that escape it are refused)."""
    base = root.resolve()
    target = (base / str(request["path"])).resolve()
    if base not in target.parents or not target.is_file():
        raise InputError("no such artifact", path=str(request["path"]))
    offset, length = int(request.get("offset") or 0), int(request.get("length") or (1 << 20))
    with open(target, "rb") as f:
        f.seek(offset)
        data = f.read(length)
    return {"data_b64": base64.b64encode(data).decode(), "eof": offset + len(data) >= target.stat().st_size}


EVENTS_FILE = "events.jsonl"  # the worker's log: one JSON event per line
LOG_SLICE = 1 << 20
#: what the worker reports in status.json beyond the state, passed through by every provider's `status`
REPORTED = ("checkpoints", "quarantined", "stop_requested")


def log_slice(data: bytes | None, request: Mapping[str, Any]) -> dict[str, Any]:
    """`logs`' answer from the whole log's bytes (None: no log yet): the part from `offset`, the next offset."""
    data = data or b""
    offset = max(0, int(request.get("offset") or 0))
    part = data[offset:offset + int(request.get("length") or LOG_SLICE)]
    return {"data_b64": base64.b64encode(part).decode(), "offset": offset + len(part),
            "eof": offset + len(part) >= len(data)}


def read_log(job: Path, request: Mapping[str, Any]) -> dict[str, Any]:
    """`logs` for a job directory on this machine: a ranged read of its events.jsonl (empty before it exists)."""
    path = job / EVENTS_FILE
    if not path.is_file():
        return log_slice(None, request)
    offset, length = max(0, int(request.get("offset") or 0)), int(request.get("length") or LOG_SLICE)
    with open(path, "rb") as f:
        f.seek(offset)
        part = f.read(length)
        size = os.fstat(f.fileno()).st_size
    return {"data_b64": base64.b64encode(part).decode(), "offset": offset + len(part), "eof": offset + len(part) >= size}


def reported(st: Mapping[str, Any], job: Path | None = None) -> dict[str, Any]:
    """The run-control fields of a worker's status.json; `stop_requested` is also true once the job directory
    holds the stop file (asked, not yet seen by the worker)."""
    out = {k: st[k] for k in REPORTED if k in st}
    if job is not None and (job / STOP_FILE).exists():
        out["stop_requested"] = True
    return out


def stop_job(job: Path, state: str | None) -> dict[str, Any]:
    """A cooperative stop of a job on this machine: the stop file in its directory, which the worker polls."""
    run_id = job.name
    if state is None:
        return {"run_id": run_id, "requested": False, "message": "no such job"}
    if state not in ("pending", "running"):
        return {"run_id": run_id, "requested": False, "message": f"the job is already {state}"}
    (job / STOP_FILE).touch()
    return {"run_id": run_id, "requested": True,
            "message": "the worker saves a full checkpoint after the current update and ends (state stopped)"}
