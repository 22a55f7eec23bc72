"""Artifacts come back to the run directory with their sha256 checked against the job's own receipt.

Files are downloaded into a hidden staging directory beside the run directory; only when every file matches its
receipt are they moved into place, so a bad download never leaves a half-collected run that looks whole.
"""
from __future__ import annotations

import base64
import hashlib
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import StatesetError
from ..core.jsonio import write_json
from ..plugin_api.jobs import ArtifactMismatch, safe_relpath

CHUNK = 4 << 20
#: receipt states whose artifacts are collected: a finished run's, and a stopped one's (its checkpoints)
COLLECTABLE = ("succeeded", "stopped")


def collect(provider: Any, run_id: str, output: Path, *, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    receipt = provider.artifacts({"run_id": run_id})
    if not receipt or receipt.get("state") not in COLLECTABLE:
        raise StatesetError(f"run {run_id} has no successful receipt to collect "
                            f"(state {(receipt or {}).get('state', 'unknown')})")
    output = Path(output)
    staging = output.parent / f".{output.name}.incoming"
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        for entry in receipt["files"]:
            rel = safe_relpath(entry["path"])
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            h, size, offset = hashlib.sha256(), 0, 0
            with open(target, "wb") as f:
                while True:
                    part = provider.read_artifact({"run_id": run_id, "path": rel, "offset": offset, "length": CHUNK})
                    data = base64.b64decode(part.get("data_b64") or "")
                    f.write(data)
                    h.update(data)
                    size += len(data)
                    offset += len(data)
                    if part.get("eof") or not data:
                        break
            if h.hexdigest() != entry["sha256"] or size != entry["size"]:
                raise ArtifactMismatch(f"{rel}: downloaded sha256 {h.hexdigest()[:16]}... ({size} bytes) does not "
                                       f"match the receipt's {entry['sha256'][:16]}... ({entry['size']} bytes); "
                                       f"nothing was installed in {output}")
        write_json(staging / "remote_receipt.json", {**receipt, **(extra or {})})
        output.mkdir(parents=True, exist_ok=True)
        for item in sorted(staging.iterdir()):
            dest = output / item.name
            if dest.is_dir():
                shutil.rmtree(dest)
            elif dest.exists():
                dest.unlink()
            os.replace(item, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return receipt
