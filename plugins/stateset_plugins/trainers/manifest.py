"""manifest.json: the lineage record of a run, from the adapter back to the log lines its rows came from."""
from __future__ import annotations

import platform
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from stateset_agents.core.jsonio import sha256_file, write_json
from stateset_agents.plugin_api.lineage import seal

#: 2: `selection` (validation of each checkpoint, the protocol) and `parent` (--init-adapter). 3: `receipts`
#: (committed_updates counted from RUN/receipts.jsonl), `quarantine`, statuses "stopped" and "quarantined".
SCHEMA_VERSION = 3
#: completed: every update committed, the adapter written; stopped: a stop request saved a checkpoint (resumable);
#: failed: nothing partial (the last checkpoint is good); quarantined: see RUN/quarantine.json.
STATUSES = ("completed", "stopped", "failed", "quarantined")
_PACKAGES = ("stateset-agents", "torch", "transformers", "peft", "safetensors", "numpy", "tokenizers")


def software_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def code_versions() -> dict[str, str | None]:
    """What a checkpoint records as its code: the package, this trainer plugin, and the libraries that shape the
    learner state (an exact continuation needs the same)."""
    from ._version import VERSION

    versions = software_versions()
    return {"stateset-agents": versions["stateset-agents"], "trainer_plugin": VERSION, "torch": versions["torch"],
            "transformers": versions["transformers"], "peft": versions["peft"]}


def lineage(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Source log files (sha256 and the lines used) and, per training row, where it came from."""
    sources: dict[str, dict[str, Any]] = {}
    per_row = []
    for row in rows:
        lin = row.get("lineage") or {}
        entry = {"dataset_line": row.get("_line"), "conversation_id": lin.get("conversation_id"),
                 "source_path": lin.get("source_path"), "line": lin.get("line"), "turn_index": lin.get("turn_index")}
        per_row.append(entry)
        if lin.get("source_path"):
            src = sources.setdefault(lin["source_path"], {"sha256": lin.get("source_sha256"), "lines": set()})
            if lin.get("line") is not None:
                src["lines"].add(lin["line"])
    for src in sources.values():
        src["lines"] = sorted(src["lines"])
    return {"sources": sources, "rows": per_row}


def write_manifest(run_path: Path, *, run_id: str, status: str, algorithm: str, config, base_model: dict,
                   dataset, committed: int, reward: dict | None, eval_summary: dict | None,
                   failure: dict | None = None, started_at: float | None = None,
                   split_isolation: dict | None = None, selection: dict | None = None,
                   parent: dict | None = None, receipts: dict | None = None,
                   quarantine: dict | None = None) -> dict[str, Any]:
    if status not in STATUSES:
        raise ValueError(f"unknown run status {status!r}")
    adapter = run_path / "adapter" / "adapter_model.safetensors"
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "status": status,
        "algorithm": algorithm,
        "base_model": base_model,
        "dataset": {"path": dataset.path, "sha256": dataset.sha256, "rows": len(dataset.rows)},
        "lineage": lineage(dataset.rows),
        "seed": config.seed,
        "config": config.to_dict(),
        "config_digest": config.digest(),
        "steps_requested": config.steps,
        "committed_updates": committed,
        "receipts": receipts,
        "quarantine": quarantine,
        "adapter": ({"path": "adapter", "sha256": sha256_file(adapter)} if adapter.exists() and status == "completed"
                    else None),
        "reward": reward,
        "eval_summary": eval_summary,
        "failure": failure,
        "split_isolation": split_isolation,
        "selection": selection,
        "parent": parent,
        "software": software_versions(),
        "started_at": started_at,
        "finished_at": time.time(),
    }
    manifest = seal(manifest)  # a changed byte shows even where nothing else cites this manifest
    write_json(run_path / "manifest.json", manifest)
    return manifest
