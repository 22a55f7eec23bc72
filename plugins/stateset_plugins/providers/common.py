"""Helpers every provider shares: credentials, quote shape, image pinning, artifact slices."""
from __future__ import annotations

import base64
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from stateset_agents.core.errors import InputError

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


def pinned_image(image: str | None, default: str | None) -> dict[str, str]:
    """Remote jobs run an image pinned by digest: a tag can move under a run id."""
    ref = image or default
    if not ref or "@sha256:" not in ref:
        raise InputError(f"the trainer image must be pinned by digest (NAME@sha256:DIGEST), got {ref!r}; set "
                         "`image` in the config", field="image")
    name, _, digest = ref.partition("@")
    return {"name": name, "digest": digest, "ref": ref}


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
