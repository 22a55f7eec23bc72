"""The adapters `serve` offers: the entries of a deploy registry, each checked before it is served.

An entry is served when its entry.json is sealed and unchanged, every file it lists has its recorded sha256, and its
run trained on the base model being served (the manifest's base model, as `--base-model` would name it). Anything
else is left out with the reason (`serve` prints them; /v1/models lists only what is served): fail closed.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.jsonio import load_json, sha256_file
from ..pipeline.lineage import ENTRY, MANIFEST
from ..plugin_api.lineage import base_model_reference, seal_problem


def _same_base(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return a is b
    return a == b or (os.path.exists(a) and os.path.exists(b) and Path(a).resolve() == Path(b).resolve())


def entry_problem(directory: Path) -> str | None:
    """Why a registry entry must not be served, or None."""
    try:
        entry = load_json(directory / ENTRY)
    except Exception as exc:  # noqa: BLE001 - an unreadable entry is a reason, not a crash
        return f"entry.json cannot be read: {exc}"
    if seal_problem(entry):
        return "entry.json changed after deploy wrote it"
    for rel, sha in (entry.get("files") or {}).items():
        path = directory / rel
        if not path.is_file():
            return f"{rel} is listed by entry.json but missing"
        if sha256_file(path) != sha:
            return f"{rel} changed after deployment (sha256 differs from entry.json)"
    if not (directory / "adapter").is_dir():
        return "the entry holds no adapter/"
    return None


def deployed(registry: str | os.PathLike | None, base_model: str | None) -> tuple[str | None, dict[str, str],
                                                                                   dict[str, str]]:
    """(the base model to serve, {name: adapter directory} to serve, {name: why it is not served}).

    Without `base_model`, the base is the one the first valid entry (in name order) trained on."""
    served: dict[str, str] = {}
    skipped: dict[str, str] = {}
    if registry is None:
        return base_model, served, skipped
    root = Path(registry)
    if not root.is_dir():
        raise InputError("the registry is not a directory (deploy an adapter into it first)", path=str(root))
    chosen = base_model
    for directory in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not (directory / ENTRY).exists():
            continue
        problem = entry_problem(directory)
        if problem is None:
            manifest = load_json(directory / MANIFEST)
            trained_on = base_model_reference(manifest.get("base_model") or {})
            if chosen is None and not served:
                chosen = trained_on
            if not _same_base(trained_on, chosen):
                problem = f"trained on {trained_on!r}, not on the served base model {chosen!r}"
        if problem:
            skipped[directory.name] = problem
        else:
            served[directory.name] = str(directory / "adapter")
    return chosen, served, skipped


def describe(registry: str | os.PathLike | None, name: str) -> dict[str, Any]:
    """What /v1/models says of an entry besides its name: who deployed it when, and its run."""
    if registry is None:
        return {}
    entry = load_json(Path(registry) / name / ENTRY)
    return {"deployed_at": entry.get("deployed_at"), "run_id": (entry.get("run") or {}).get("run_id"),
            "adapter_sha256": entry.get("adapter_sha256"), "promoted": entry.get("promoted")}
