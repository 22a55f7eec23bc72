"""`deploy`: copy a promoted run's adapter, manifest and promotion.json into a registry folder.

    REGISTRY/NAME/adapter/          the adapter as trained
    REGISTRY/NAME/manifest.json     the run's lineage record, unchanged
    REGISTRY/NAME/promotion.json    the gate's decision citing this manifest (when there is one)
    REGISTRY/NAME/eval_results.json the run's held-out evaluation (when there is one)
    REGISTRY/NAME/entry.json        sealed: who, when, whether --force was needed and why, sha256 of every file

A run is promoted when a promotion.json (RUN/promotion.json, written by a passing gate, or --promotion FILE) says
so and cites this run's manifest by sha256. Anything else needs --force, and entry.json records it. The entry is
built in a hidden temporary folder and renamed into place, so a registry never holds half an entry.
"""
from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ..core._version import __version__
from ..core.errors import InputError, StatesetError
from ..core.jsonio import load_json, sha256_file, write_json
from ..plugin_api.checkpoints import refuse_quarantined
from ..plugin_api.lineage import seal, seal_problem
from .lineage import ADAPTER_WEIGHTS, ENTRY, MANIFEST, PROMOTION, trace

ENTRY_SCHEMA = 1
COPIED_FILES = (MANIFEST, PROMOTION, "eval_results.json")


class NotPromoted(StatesetError):
    exit_code = 5


def promotion_status(run: Path, manifest_sha: str, promotion: Path | None) -> tuple[bool, str, Path | None]:
    """(promoted, why, the promotion file to copy)."""
    path = promotion or run / PROMOTION
    if not path.exists():
        return False, "no promotion.json (run `stateset-agents gate` over the run's seeds first)", None
    record = load_json(path)
    if seal_problem(record):
        raise InputError("promotion.json changed after the gate wrote it", path=str(path))
    if not any(r.get("manifest_sha256") == manifest_sha for r in record.get("runs") or []):
        return False, "promotion.json does not cite this run's manifest", None
    if not record.get("promoted"):
        return False, f"the gate did not promote it (failed: {', '.join(record.get('failed_conditions') or [])})", \
            path
    return True, "promoted by the gate", path


def deploy(run: str | Path, registry: str | Path, *, name: str | None = None, force: bool = False,
           promotion: str | Path | None = None) -> dict[str, Any]:
    run, registry = Path(run), Path(registry)
    if not (run / MANIFEST).exists():
        raise InputError("not a run directory (no manifest.json)", path=str(run))
    refuse_quarantined(run, "deployed")  # not even with --force
    manifest = load_json(run / MANIFEST)
    if manifest.get("status") != "completed" or not (run / ADAPTER_WEIGHTS).exists():
        raise InputError("the run did not complete with an adapter; nothing to deploy", path=str(run))
    lineage = trace(run)  # never deploy an adapter or manifest that no longer matches its record
    lineage.raise_if_broken()
    manifest_sha = sha256_file(run / MANIFEST)
    promoted, why, promotion_file = promotion_status(run, manifest_sha, Path(promotion) if promotion else None)
    if not promoted and not force:
        raise NotPromoted(f"{run} is not promoted: {why}. Pass --force to deploy it anyway (recorded in the entry)")
    name = name or run.resolve().name
    if not name or "/" in name or name.startswith("."):
        raise InputError(f"invalid registry entry name {name!r}", field="name")
    final = registry / name
    if final.exists():
        raise InputError("the registry already holds an entry of that name; choose another --name",
                         path=str(final))
    registry.mkdir(parents=True, exist_ok=True)
    _remove_dead_entries(registry, name)
    tmp = registry / f".{name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        _copy_tree(run / "adapter", tmp / "adapter")
        for filename in COPIED_FILES:
            source = promotion_file if filename == PROMOTION else run / filename
            if source is not None and source.exists():
                _copy(source, tmp / filename)
        files = {p.relative_to(tmp).as_posix(): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file()}
        entry = seal({
            "schema_version": ENTRY_SCHEMA, "name": name,
            "run": {"path": str(run), "run_id": manifest.get("run_id"), "manifest_sha256": manifest_sha},
            "adapter_sha256": (manifest.get("adapter") or {}).get("sha256"),
            "promoted": promoted, "forced": not promoted, "force_reason": None if promoted else why,
            "deployed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "stateset_agents": __version__, "files": files,
        })
        write_json(tmp / ENTRY, entry)
        os.rename(tmp, final)  # atomic on one filesystem; fails rather than merge if `final` appeared meanwhile
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) and str(exc.filename or "").startswith(f"{tmp}{os.sep}"):
            exc.filename = str(final) + exc.filename[len(str(tmp)):]  # the entry's file, not the hidden copy's
        raise
    return {**entry, "path": str(final)}


def _copy_tree(source: Path, target: Path) -> None:
    """shutil.copytree, but a file that cannot be written (a full disk) fails at once naming it, where copytree
    gathers every failure into one shutil.Error that names no errno."""
    target.mkdir(parents=True)
    for path in sorted(source.rglob("*")):
        if path.is_dir():
            (target / path.relative_to(source)).mkdir(parents=True, exist_ok=True)
        else:
            _copy(path, target / path.relative_to(source))


def _copy(source: Path, target: Path) -> None:
    try:
        shutil.copy2(source, target)
    except OSError as exc:
        # a failed write(2) names nothing, a failed sendfile(2) names the source first: a full disk is the target's
        if exc.filename is None or exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            exc.filename, exc.filename2 = str(target), None
        raise


def _remove_dead_entries(registry: Path, name: str) -> None:
    """A deploy killed mid-copy leaves its hidden `.NAME.tmp-PID` folder; the next deploy of NAME removes those
    whose process is gone (a live one is another deploy's, still copying)."""
    for tmp in registry.glob(f".{name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass  # another user's process: alive

