"""A run directory's checkpoints, receipts and quarantine, read without torch: what the trainer writes and what
`finetune checkpoints`, `prepare-resume`, the remote worker, `lineage` and the report read.

    RUN/checkpoints/step-000010/state.json   written last (its presence marks a whole checkpoint): step, cursor,
        config and digest, dataset and base-model identity, "files" {relpath: sha256} of every other file of the
        checkpoint, "learner_state" (which of LEARNER_STATE it holds), "code" (package versions)
    RUN/receipts.jsonl    one line per attempted update (committed or not), each citing the previous line's sha256
    RUN/quarantine.json   present while the run is quarantined (a partial update or a failed late restore);
        `train --reload` moves it aside as quarantine.resolved-TIME.json with the resolution added

Stdlib and `core.jsonio` only: the kernel and every provider's worker import this.
"""
from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..core.errors import InputError
from ..core.jsonio import canonical_json, load_json, sha256_bytes, sha256_file

QUARANTINE_FILE = "quarantine.json"
RECEIPTS_FILE = "receipts.jsonl"
STATE_FILE = "state.json"
CHECKPOINTS_DIR = "checkpoints"
ADAPTER_WEIGHTS = "adapter/adapter_model.safetensors"  # in a checkpoint and in the run directory
VALIDATION_LOG = "checkpoint_validation.jsonl"
RESOLVED_PREFIX = "quarantine.resolved-"  # RUN/quarantine.resolved-20261201T150000Z.json
#: What an exact continuation needs: the weights, the optimizer and its schedule, every RNG, the data order.
LEARNER_STATE = ("adapter", "optimizer", "scheduler", "rng", "data_cursor")
RUN_STATES = ("completed", "stopped", "failed", "quarantined", "running", "empty")


# ------------------------------------------------------------------------------------------------ checkpoints
def checkpoint_dirs(run_dir: str | Path) -> list[Path]:
    """RUN/checkpoints/step-K directories that hold a state.json (whole checkpoints), in step order."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = []
    for p in root.iterdir():
        head, _, number = p.name.partition("-")
        if head == "step" and number.isdigit() and (p / STATE_FILE).is_file():
            found.append(p)
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def checkpoint_files(path: str | Path) -> dict[str, str]:
    """{relpath: sha256} of every file of a checkpoint directory but state.json (which records this) and what is
    added after it (the validation results)."""
    path = Path(path)
    out = {}
    for f in sorted(path.rglob("*")):
        rel = f.relative_to(path).as_posix()
        if f.is_file() and rel not in (STATE_FILE, "validation_results.json"):
            out[rel] = sha256_file(f)
    return out


def _problems(path: Path, state: Mapping[str, Any], require: Sequence[str]) -> list[tuple[str, str, str]]:
    """(what, file, why) for each way the checkpoint falls short: (component, file, reason)."""
    problems = []
    files = state.get("files")
    if not isinstance(files, dict):
        problems.append(("files", STATE_FILE, "records no file digests (a checkpoint from before receipts): its "
                                               "files cannot be verified"))
        files = {}
    for rel, expected in files.items():
        f = path / rel
        if not f.is_file():
            problems.append((rel, rel, "is missing"))
        elif sha256_file(f) != expected:
            problems.append((rel, rel, f"sha256 differs from the one state.json records ({str(expected)[:12]}...)"))
    held = state.get("learner_state")
    held = set(held) if isinstance(held, list) else set()
    for part in require:
        if part not in held:
            problems.append((part, STATE_FILE, f"holds no {part} state (field 'learner_state')"))
    if files and "adapter" in require and ADAPTER_WEIGHTS not in files:
        problems.append(("adapter", ADAPTER_WEIGHTS, "is not among the checkpoint's files"))
    return problems


def _identity(path: Path, state: Mapping[str, Any]) -> dict[str, Any]:
    step = int(state.get("step", 0))
    return {"step": step, "committed_updates": int(state.get("committed_updates", step)),
            "code": state.get("code") or {}, "base_model": state.get("base_model") or {},
            "dataset_sha256": state.get("dataset_sha256"), "config_digest": state.get("config_digest"),
            "algorithm": state.get("algorithm"), "run_id": state.get("run_id"),
            "files": dict(state.get("files") or {}), "learner_state": list(state.get("learner_state") or []),
            "path": str(path)}


def _read_state(path: Path) -> dict[str, Any]:
    state = load_json(path / STATE_FILE)  # InputError naming the file when missing or not JSON
    if not isinstance(state, dict) or not isinstance(state.get("step"), int):
        raise InputError("not a checkpoint's state (an object with an integer step)", path=str(path / STATE_FILE),
                         field="step")
    return state


def verify_checkpoint(path: str | Path, *, require: Sequence[str] = LEARNER_STATE) -> dict[str, Any]:
    """The checkpoint's identity once every file matches its recorded sha256 and it holds `require`; otherwise an
    InputError naming the first file and field that fail (all problems are listed in the message)."""
    path = Path(path)
    state = _read_state(path)
    problems = _problems(path, state, require)
    if problems:
        what, rel, why = problems[0]
        more = "; ".join(f"{r} {w}" for _, r, w in problems[1:])
        raise InputError(f"checkpoint step {state['step']} is not complete: {rel} {why}"
                         + (f"; also: {more}" if more else ""), path=str(path / rel),
                         field="learner_state" if rel == STATE_FILE and what in LEARNER_STATE else "files")
    return _identity(path, state)


def _validation(run_dir: Path) -> dict[int, dict[str, Any]]:
    path = run_dir / VALIDATION_LOG
    out: dict[int, dict[str, Any]] = {}
    if not path.is_file():
        return out
    for raw in path.read_bytes().splitlines():
        try:
            rec = json.loads(raw)
        except ValueError:
            continue  # a partial last line of a killed run
        if isinstance(rec, dict) and isinstance(rec.get("step"), int):
            out[rec["step"]] = {"mean": rec.get("candidate_mean"), "split": rec.get("split"),
                                "base_mean": rec.get("base_mean"), "cases": rec.get("cases"),
                                "mean_difference": rec.get("mean_difference")}
    return out


def checkpoint_table(run_dir: str | Path) -> list[dict[str, Any]]:
    """One row per whole checkpoint: step, committed updates, path (relative to the run), the adapter weights'
    sha256, whether it is complete (full learner state, every file as recorded) and what is missing, and its
    validation score when it was evaluated."""
    run_dir = Path(run_dir)
    scores = _validation(run_dir)
    rows = []
    for path in checkpoint_dirs(run_dir):
        try:
            state = _read_state(path)
        except InputError as exc:
            rows.append({"step": int(path.name.split("-")[1]), "committed_updates": None,
                         "path": path.relative_to(run_dir).as_posix(), "sha256": None, "complete": False,
                         "missing": [str(exc)], "validation": None})
            continue
        weights = path / ADAPTER_WEIGHTS
        problems = _problems(path, state, LEARNER_STATE)
        rows.append({"step": state["step"], "committed_updates": int(state.get("committed_updates", state["step"])),
                     "path": path.relative_to(run_dir).as_posix(),
                     "sha256": sha256_file(weights) if weights.is_file() else None,
                     "complete": not problems, "missing": [f"{rel} {why}" for _, rel, why in problems],
                     "validation": scores.get(state["step"])})
    return rows


def latest_complete(run_dir: str | Path) -> Path | None:
    """The latest checkpoint that verifies (None when none does)."""
    for path in reversed(checkpoint_dirs(run_dir)):
        try:
            verify_checkpoint(path)
        except InputError:
            continue
        return path
    return None


# ------------------------------------------------------------------------------------------------- quarantine
def quarantine(run_dir: str | Path) -> dict[str, Any] | None:
    """The record in RUN/quarantine.json ({reason, message, step, last_good_checkpoint, at, ...}), or None."""
    path = Path(run_dir) / QUARANTINE_FILE
    if not path.exists():
        return None
    record = load_json(path)
    if not isinstance(record, dict):
        raise InputError("a quarantine record must be an object", path=str(path))
    return record


def quarantine_history(run_dir: str | Path) -> list[dict[str, Any]]:
    """Resolved quarantines (moved aside by `train --reload`), oldest first."""
    run_dir = Path(run_dir)
    return [load_json(p) for p in sorted(run_dir.glob(f"{RESOLVED_PREFIX}*.json"))]


class RunQuarantined(InputError):
    """A quarantined run asked to be deployed, nominated, gated or resumed."""


def refuse_quarantined(run_dir: str | Path, doing: str) -> None:
    """Raise RunQuarantined when the run is quarantined (RUN/quarantine.json, or a manifest that says so):
    `doing` says what was refused ("deployed", "nominated", "gated")."""
    run_dir = Path(run_dir)
    record = quarantine(run_dir)
    if record is None:
        manifest_path = run_dir / "manifest.json"
        try:
            manifest = load_json(manifest_path) if manifest_path.is_file() else {}
        except InputError:
            manifest = {}
        if not (isinstance(manifest, dict) and manifest.get("status") == "quarantined"):
            return
        record = manifest.get("quarantine") or manifest.get("failure") or {}
    raise RunQuarantined(f"the run is quarantined ({record.get('reason') or record.get('cause')} at update "
                         f"{record.get('step')}: {record.get('message')}); a quarantined run is never {doing}. "
                         "`train --reload` with the run's flags restores its latest complete checkpoint, verified, "
                         "and finishes it", path=str(run_dir / QUARANTINE_FILE))


def run_state(run_dir: str | Path) -> str:
    """One of RUN_STATES: quarantined while quarantine.json is present; else what the manifest records (an old
    manifest's "failed" with reason "interrupted" is "stopped"); else running when the run has started (no final
    record yet: still going, or killed), empty when the directory holds no run."""
    run_dir = Path(run_dir)
    if (run_dir / QUARANTINE_FILE).exists():
        return "quarantined"
    manifest_path = run_dir / "manifest.json"
    if manifest_path.is_file():
        try:
            manifest = load_json(manifest_path)
        except InputError:
            manifest = {}
        status = manifest.get("status") if isinstance(manifest, dict) else None
        if status == "failed" and (manifest.get("failure") or {}).get("reason") == "interrupted":
            return "stopped"
        if status in ("completed", "stopped", "failed"):
            return status
        # "quarantined" without quarantine.json: `--reload` resolved it and the run goes on
    started = any((run_dir / m).exists() for m in (CHECKPOINTS_DIR, "metrics.jsonl", RECEIPTS_FILE, "adapter"))
    return "running" if started else "empty"


# --------------------------------------------------------------------------------------------------- receipts
def chain_digest(line: bytes | None) -> str | None:
    """What a receipt records as `prev_sha256`: the sha256 of the previous line as written (no newline)."""
    return None if line is None else sha256_bytes(line)


def _receipt_lines(run_dir: Path) -> list[bytes]:
    path = run_dir / RECEIPTS_FILE
    return [r for r in path.read_bytes().splitlines() if r.strip()] if path.is_file() else []


def read_receipts(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every receipt line that parses, in order (a partial last line of a killed run is skipped)."""
    out = []
    for raw in _receipt_lines(Path(run_dir)):
        try:
            rec = json.loads(raw)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def receipts_origin(receipts: Sequence[Mapping[str, Any]]) -> int:
    """The step the receipts begin after: 0, or K when the run was resumed from checkpoint K without the receipts
    of its first K updates (they predate receipts, or the checkpoint came without them); an "origin" line says so."""
    return next((int(r.get("step", 0)) for r in receipts if r.get("phase") == "origin"), 0)


def committed_updates(receipts: Sequence[Mapping[str, Any]]) -> int:
    """The committed updates the receipts account for (the manifest's committed_updates)."""
    return receipts_origin(receipts) + len(committed_receipts(receipts))


def committed_receipts(receipts: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The receipts of committed policy updates (value pre-training updates count no step)."""
    return [r for r in receipts if r.get("committed") is True and r.get("phase", "policy") == "policy"]


def verify_receipts(run_dir: str | Path, manifest: Mapping[str, Any] | None) -> list[str]:
    """Problems with RUN/receipts.jsonl against the manifest: unreadable lines, a broken chain (an edited or dropped
    line), committed steps not 1..n, a count other than the manifest's committed_updates, a last line other than
    the one the manifest cites, a final adapter other than the last committed update. A run from before receipts
    (its manifest records none) has nothing to verify."""
    run_dir = Path(run_dir)
    manifest = manifest or {}
    recorded = manifest.get("receipts")
    lines = _receipt_lines(run_dir)
    if not lines:
        return [f"{RECEIPTS_FILE} is missing or empty, but the manifest counts receipts"] if recorded else []
    problems, receipts, prev = [], [], None
    for number, raw in enumerate(lines, start=1):
        try:
            rec = json.loads(raw)
        except ValueError as exc:
            problems.append(f"{RECEIPTS_FILE}:{number}: not JSON ({exc})")
            prev = raw
            continue
        if not isinstance(rec, dict):
            problems.append(f"{RECEIPTS_FILE}:{number}: not an object")
        elif rec.get("prev_sha256") != chain_digest(prev):
            problems.append(f"{RECEIPTS_FILE}:{number}: the chain breaks (prev_sha256 does not match line "
                            f"{number - 1}): a line was edited, dropped or inserted")
        if isinstance(rec, dict):
            receipts.append(rec)
        prev = raw
    committed, origin = committed_receipts(receipts), receipts_origin(receipts)
    steps = [r.get("step") for r in committed]
    if steps != list(range(origin + 1, origin + len(steps) + 1)):
        at = next(i for i, s in enumerate(steps) if s != origin + i + 1)
        problems.append(f"committed steps are not contiguous from {origin + 1}: committed receipt {at + 1} is step "
                        f"{steps[at]!r}, expected {origin + at + 1}")
    if "committed_updates" in manifest and origin + len(committed) != manifest.get("committed_updates"):
        since = f" after the origin at step {origin}" if origin else ""
        problems.append(f"{len(committed)} committed receipts{since}, the manifest counts "
                        f"{manifest.get('committed_updates')} committed updates")
    if isinstance(recorded, Mapping) and recorded.get("last_sha256") not in (None, chain_digest(lines[-1])):
        problems.append(f"the last receipt is not the one the manifest cites (last_sha256 "
                        f"{str(recorded.get('last_sha256'))[:12]}...): lines were added or dropped at the end")
    adapter = run_dir / ADAPTER_WEIGHTS
    last = committed[-1] if committed else None
    recorded_adapter = (manifest.get("adapter") or {}).get("sha256") if isinstance(manifest.get("adapter"), Mapping) \
        else None
    # a file that differs from the manifest's sha256 is that check's problem; this one asks whether the adapter
    # the manifest records is the last committed update
    as_recorded = adapter.is_file() and (recorded_adapter is None or sha256_file(adapter) == recorded_adapter)
    if manifest.get("adapter") and as_recorded and last and last.get("update_sha256"):
        actual = safetensors_digest(adapter)
        if actual != last["update_sha256"]:
            problems.append(f"the final adapter's update digest {actual[:12]}... is not the last committed "
                            f"update's ({str(last['update_sha256'])[:12]}..., step {last.get('step')})")
    return problems


# --------------------------------------------------------------------------------------------------- digests
def tensors_digest(entries: Iterable[tuple[str, str, Sequence[int], bytes]]) -> str:
    """sha256 over named tensors (name, safetensors dtype such as "F32", shape, raw little-endian bytes), in name
    order: the update digest. The trainer takes it over the adapter's weights in memory; `safetensors_digest` over
    the saved file gives the same value, so the final adapter can be checked against the last receipt."""
    h = hashlib.sha256()
    for name, dtype, shape, data in sorted(entries, key=lambda e: e[0]):
        h.update(canonical_json([name, dtype, list(shape), len(data)]))
        h.update(data)
    return h.hexdigest()


def safetensors_digest(path: str | Path) -> str:
    """`tensors_digest` of a .safetensors file (its header: 8-byte little-endian length, then JSON)."""
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise InputError("not a safetensors file (shorter than its header length)", path=str(path))
        (size,) = struct.unpack("<Q", head)
        try:
            header = json.loads(f.read(size))
        except ValueError as exc:
            raise InputError(f"not a safetensors file (header: {exc})", path=str(path)) from None
        base = 8 + size
        entries = []
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = info["data_offsets"]
            f.seek(base + start)
            data = f.read(end - start)
            if len(data) != end - start:
                raise InputError(f"truncated safetensors file (tensor {name})", path=str(path))
            entries.append((name, info["dtype"], info["shape"], data))
    return tensors_digest(entries)
