"""Lineage: from a deployed adapter back to the log lines it learned from, checking every digest on the way.

    adapter sha256 -> run manifest (base model and revision, seed, config digest, algorithm, committed updates,
    eval summary, promotion) -> dataset sha256 -> each training row -> conversation id -> log file sha256 and line

A target is a run directory (`train --output`) or a registry entry (`deploy --to`); both hold manifest.json and
adapter/. In a run directory the update receipts (receipts.jsonl) are verified against the manifest (their count
is its committed updates, the steps run 1..n, the chain is intact, the final adapter is the last committed
update), and a quarantine (quarantine.json) is shown.

Any digest that does not match (adapter weights, manifest, promotion.json, dataset, a source log, a file a
registry entry lists, a receipt) is a *problem* naming the file; `lineage` exits non-zero on any problem. Files
that are simply not on this machine (a dataset or log elsewhere) are *warnings*: they cannot be checked, but
nothing contradicts the record; a quarantine is a warning too (the record is consistent, the run unfinished).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.errors import InputError, StatesetError
from ..core.jsonio import load_json, read_jsonl, sha256_file
from ..plugin_api.checkpoints import RECEIPTS_FILE, quarantine, quarantine_history, read_receipts, run_state
from ..plugin_api.checkpoints import committed_updates, verify_receipts
from ..plugin_api.lineage import base_model_reference, seal_problem

MANIFEST = "manifest.json"
PROMOTION = "promotion.json"
ENTRY = "entry.json"  # what `deploy` writes into a registry entry
ADAPTER_WEIGHTS = Path("adapter") / "adapter_model.safetensors"
class LineageBroken(StatesetError):
    """A recorded digest does not match the file on disk."""

    exit_code = 4


@dataclass
class Lineage:
    target: str
    kind: str  # "run" or "registry"
    chain: dict[str, Any] = field(default_factory=dict)
    problems: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)

    def problem(self, path: Path | str, message: str) -> None:
        self.problems.append({"path": str(path), "message": message})

    def warn(self, path: Path | str, message: str) -> None:
        self.warnings.append({"path": str(path), "message": message})

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "kind": self.kind, "ok": self.ok, **self.chain, "problems": self.problems,
                "warnings": self.warnings}

    def raise_if_broken(self) -> None:
        if self.problems:
            listed = "; ".join(f"{p['path']}: {p['message']}" for p in self.problems)
            raise LineageBroken(f"lineage of {self.target} is broken: {listed}")


def _load_record(path: Path, lineage: Lineage) -> dict[str, Any] | None:
    try:
        record = load_json(path)
    except InputError as exc:
        lineage.problem(path, f"unreadable: {exc.detail}")
        return None
    if not isinstance(record, dict):
        lineage.problem(path, "not a JSON object")
        return None
    broken = seal_problem(record)
    if broken:
        lineage.problem(path, f"changed after it was written ({broken})")
    return record


def _check_file(path: Path, recorded: str | None, lineage: Lineage, what: str) -> bool | None:
    """True: matches; False: differs (a problem); None: missing or nothing recorded (a warning)."""
    if not recorded:
        lineage.warn(path, f"no sha256 recorded for the {what}")
        return None
    if not path.exists():
        lineage.warn(path, f"the {what} is not on this machine; not verified")
        return None
    actual = sha256_file(path)
    if actual != recorded:
        lineage.problem(path, f"the {what} changed: sha256 {actual[:12]}..., recorded {recorded[:12]}...")
        return False
    return True


def _manifest_summary(manifest: Mapping[str, Any], path: Path) -> dict[str, Any]:
    base = manifest.get("base_model") or {}
    return {"path": str(path), "sha256": sha256_file(path), "run_id": manifest.get("run_id"),
            "status": manifest.get("status"), "algorithm": manifest.get("algorithm"),
            "base_model": base_model_reference(base) or base.get("name"), "base_model_identity": base,
            "base_model_revision": base.get("revision") or base.get("gguf_sha256") or
            base.get("model.safetensors_sha256"),
            "seed": manifest.get("seed"), "config_digest": manifest.get("config_digest"),
            "committed_updates": manifest.get("committed_updates"), "reward": manifest.get("reward"),
            "eval_summary": manifest.get("eval_summary"), "split_isolation": manifest.get("split_isolation")}


def _check_promotion(directory: Path, manifest_sha: str, lineage: Lineage) -> dict[str, Any] | None:
    path = directory / PROMOTION
    if not path.exists():
        return None
    promotion = _load_record(path, lineage)
    if promotion is None:
        return None
    cited = [r for r in promotion.get("runs") or [] if r.get("manifest_sha256") == manifest_sha]
    if not cited:
        lineage.problem(directory / MANIFEST, "promotion.json cites no run with this manifest's sha256: the "
                                              "manifest changed after the gate, or the promotion is another run's")
    return {"path": str(path), "promoted": promotion.get("promoted"),
            "failed_conditions": promotion.get("failed_conditions"),
            "mean_difference": (promotion.get("statistics") or {}).get("mean_difference"),
            "p_value": (promotion.get("statistics") or {}).get("p_value"), "runs": len(promotion.get("runs") or [])}


def _check_entry(directory: Path, lineage: Lineage) -> dict[str, Any] | None:
    path = directory / ENTRY
    if not path.exists():
        return None
    entry = _load_record(path, lineage)
    if entry is None:
        return None
    for rel, sha in (entry.get("files") or {}).items():
        target = directory / rel
        if not target.exists():
            lineage.problem(target, "listed by entry.json but missing")
        elif sha256_file(target) != sha:
            lineage.problem(target, "changed after deployment (sha256 differs from entry.json)")
    return {key: entry.get(key) for key in ("name", "deployed_at", "forced", "force_reason", "run")}


def _check_receipts(directory: Path, manifest: Mapping[str, Any], lineage: Lineage) -> dict[str, Any] | None:
    """The receipts' verification, the run's state and its quarantine (current and resolved), in a run directory
    (a registry entry holds no receipts: they were verified when it was deployed)."""
    if lineage.kind != "run":
        return None
    path = directory / RECEIPTS_FILE
    for problem in verify_receipts(directory, manifest):
        lineage.problem(path, problem)
    receipts = read_receipts(directory)
    try:
        record = quarantine(directory)
    except InputError as exc:
        lineage.problem(directory, exc.detail)
        record = None
    if record is not None:
        lineage.warn(directory, f"the run is quarantined ({record.get('reason')} at update {record.get('step')}): "
                                f"{record.get('message')}")
    return {"path": str(path), "attempted": len(receipts),
            "committed": committed_updates(receipts),
            "verified": None if not receipts else not any(p["path"] == str(path) for p in lineage.problems),
            "state": run_state(directory), "quarantine": record, "resolved": quarantine_history(directory)}


def _resolve(recorded: str | None, anchor: Path) -> Path | None:
    """A path as the manifest recorded it (relative to where the step ran), else relative to the target's
    parent."""
    if not recorded:
        return None
    path = Path(recorded)
    if path.exists() or path.is_absolute():
        return path
    beside = anchor.parent / recorded
    return beside if beside.exists() else path


def _training_rows(dataset_path: Path, manifest: Mapping[str, Any], lineage: Lineage) -> list[dict[str, Any]]:
    """Each training row with where it came from, cross-checked against the dataset file when it is verified."""
    recorded = (manifest.get("lineage") or {}).get("rows") or []
    sources = (manifest.get("lineage") or {}).get("sources") or {}
    by_line: dict[int, Any] = {}
    if dataset_path is not None and lineage.chain["dataset"]["verified"]:
        by_line = dict(read_jsonl(dataset_path))
    rows = []
    for entry in recorded:
        src = entry.get("source_path")
        row = {"dataset_line": entry.get("dataset_line"), "conversation_id": entry.get("conversation_id"),
               "turn_index": entry.get("turn_index"), "source_path": src,
               "source_sha256": (sources.get(src) or {}).get("sha256") if src else None, "line": entry.get("line")}
        actual = by_line.get(entry.get("dataset_line"))
        if by_line and isinstance(actual, dict):
            found = (actual.get("lineage") or {}).get("conversation_id")
            if found is not None and found != row["conversation_id"]:
                lineage.problem(dataset_path, f"line {row['dataset_line']} is conversation {found!r}, the manifest "
                                              f"says {row['conversation_id']!r}")
        rows.append(row)
    return rows


def trace(target: str | Path) -> Lineage:
    """Walk and verify the chain of one run directory or registry entry."""
    directory = Path(target)
    manifest_path = directory / MANIFEST
    if not manifest_path.exists():
        raise InputError("not a run directory or registry entry (no manifest.json)", path=str(directory))
    lineage = Lineage(str(directory), "registry" if (directory / ENTRY).exists() else "run")
    deployment = _check_entry(directory, lineage)
    manifest = _load_record(manifest_path, lineage)
    if manifest is None:
        lineage.raise_if_broken()
    summary = _manifest_summary(manifest, manifest_path)
    adapter = manifest.get("adapter") or {}
    adapter_path = directory / ADAPTER_WEIGHTS
    lineage.chain["adapter"] = {"path": str(adapter_path), "sha256": adapter.get("sha256"),
                                "verified": _check_file(adapter_path, adapter.get("sha256"), lineage, "adapter")}
    lineage.chain["manifest"] = summary
    lineage.chain["receipts"] = _check_receipts(directory, manifest, lineage)
    lineage.chain["promotion"] = _check_promotion(directory, summary["sha256"], lineage)
    lineage.chain["deployment"] = deployment
    dataset = manifest.get("dataset") or {}
    dataset_path = _resolve(dataset.get("path"), directory)
    lineage.chain["dataset"] = {"path": str(dataset_path) if dataset_path else None, "sha256": dataset.get("sha256"),
                                "rows": dataset.get("rows"), "verified": None}
    if dataset_path is not None:
        lineage.chain["dataset"]["verified"] = _check_file(dataset_path, dataset.get("sha256"), lineage, "dataset")
    lineage.chain["rows"] = _training_rows(dataset_path, manifest, lineage)
    sources = {}
    for src, info in ((manifest.get("lineage") or {}).get("sources") or {}).items():
        path = _resolve(src, directory)
        sources[src] = {"sha256": info.get("sha256"), "lines": info.get("lines"),
                        "verified": _check_file(path, info.get("sha256"), lineage, "source log")}
    lineage.chain["sources"] = sources
    return lineage


def expand_targets(paths: Iterable[str | Path]) -> list[Path]:
    """Run directories and registry entries: each path itself when it holds manifest.json, else its immediate
    subdirectories that do (so `runs/` or `registry/` searches them all)."""
    found: list[Path] = []
    for p in map(Path, paths):
        if (p / MANIFEST).exists():
            found.append(p)
        elif p.is_dir():
            found.extend(sorted(d for d in p.iterdir() if (d / MANIFEST).exists()))
        else:
            raise InputError("not a directory", path=str(p))
    return found


def adapters_trained_on(paths: Iterable[str | Path], conversation_id: str) -> list[dict[str, Any]]:
    """Which adapters did this conversation train? Every target whose manifest lists a row from it."""
    hits = []
    for directory in expand_targets(paths):
        try:
            manifest = load_json(directory / MANIFEST)
        except InputError:
            continue
        rows = [r for r in (manifest.get("lineage") or {}).get("rows") or []
                if r.get("conversation_id") == conversation_id]
        if rows:
            hits.append({"target": str(directory), "run_id": manifest.get("run_id"),
                         "adapter_sha256": (manifest.get("adapter") or {}).get("sha256"),
                         "deployed": (directory / ENTRY).exists(), "rows": rows})
    return hits
