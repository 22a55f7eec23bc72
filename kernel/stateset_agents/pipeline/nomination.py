"""Nominating a checkpoint and the ledger of test looks.

`train` evaluates each checkpoint on the validation split (RUN/checkpoint_validation.jsonl); a person reads those
results and nominates one (`stateset-agents nominate RUN --checkpoint K`: RUN/nomination.json). The final checkpoint
is not automatically the best. `evaluate --run RUN --split test` evaluates the nominated checkpoint on the test
split, once: every look is a line of RUN/test_looks.jsonl (the checkpoint's adapter sha256, the test file's
sha256, where the results are and their sha256), and a second look at the same checkpoint is refused unless
``--again`` (recorded as such). The gate reads the recorded test results of nominated checkpoints.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Mapping

import orjson

from ..core.errors import InputError
from ..core.jsonio import dumps_line, load_json, sha256_file, write_json
from ..plugin_api.checkpoints import refuse_quarantined
from .lineage import MANIFEST

NOMINATION, LEDGER, TEST_DIR = "nomination.json", "test_looks.jsonl", "test"
VALIDATION_LOG = "checkpoint_validation.jsonl"
SCHEMA_VERSION = 1
WEIGHTS = "adapter_model.safetensors"


def checkpoint_dir(run: Path, step: int) -> Path:
    return run / "checkpoints" / f"step-{step:06d}"


def _validation_record(run: Path, step: int) -> dict[str, Any] | None:
    path = run / VALIDATION_LOG
    if not path.exists():
        return None
    found = None
    for raw in path.read_bytes().splitlines():
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if rec.get("step") == step:
            found = rec
    return found


def _completed_manifest(run: Path) -> dict[str, Any]:
    path = run / MANIFEST
    if not path.is_file():
        raise InputError("not a run directory (no manifest.json)", path=str(run))
    refuse_quarantined(run, "nominated")
    manifest = load_json(path)
    if manifest.get("status") != "completed":
        raise InputError(f"the run did not complete (status {manifest.get('status')!r})", path=str(run))
    return manifest


def nominate(run: str | Path, step: int) -> dict[str, Any]:
    """Record checkpoint `step` of `run` as the one to test; returns the nomination."""
    run = Path(run)
    manifest = _completed_manifest(run)
    ckpt = checkpoint_dir(run, step)
    weights = ckpt / "adapter" / WEIGHTS
    if not weights.is_file():
        kept = sorted(int(p.name.split("-")[1]) for p in (run / "checkpoints").glob("step-*")
                      if (p / "adapter" / WEIGHTS).is_file()) if (run / "checkpoints").is_dir() else []
        raise InputError(f"checkpoint {step} is not in this run (kept checkpoints: "
                         f"{', '.join(map(str, kept)) or 'none'}; keep_checkpoints decides how many stay, and the "
                         "best on validation is always kept)", path=str(run), field="checkpoint")
    previous = load_json(run / NOMINATION) if (run / NOMINATION).exists() else None
    looks = read_ledger(run)
    selection = manifest.get("selection") or {}
    record = {
        "schema_version": SCHEMA_VERSION,
        "run_id": manifest.get("run_id"),
        "step": step,
        "final_step": manifest.get("committed_updates"),
        "adapter": {"path": str(ckpt.relative_to(run) / "adapter"), "sha256": sha256_file(weights)},
        "validation": _validation_record(run, step),
        "best_on_validation": selection.get("best_on_validation"),
        "nominated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        # a nomination changed after a test look is allowed, and visible: the test result has been seen
        "after_test_looks": len(looks),
        "history": ((previous or {}).get("history") or []) + ([{k: previous.get(k) for k in
                                                                ("step", "nominated_at", "adapter")}]
                                                              if previous else []),
    }
    write_json(run / NOMINATION, record)
    return record


def nomination_of(run: str | Path) -> dict[str, Any]:
    run = Path(run)
    if not (run / NOMINATION).is_file():
        raise InputError("no checkpoint is nominated in this run: read the validation results (manifest.json "
                         f"`selection`, or {VALIDATION_LOG}) and run `stateset-agents nominate {run} --checkpoint K`",
                         path=str(run))
    record = load_json(run / NOMINATION)
    weights = run / record["adapter"]["path"] / WEIGHTS
    if not weights.is_file() or sha256_file(weights) != record["adapter"]["sha256"]:
        raise InputError("the nominated checkpoint's adapter is missing or changed since it was nominated",
                         path=str(weights))
    return record


def read_ledger(run: str | Path) -> list[dict[str, Any]]:
    path = Path(run) / LEDGER
    if not path.exists():
        return []
    return [orjson.loads(raw) for raw in path.read_bytes().splitlines() if raw.strip()]


def check_test_look(run: str | Path, nomination: Mapping[str, Any], *, again: bool) -> list[dict[str, Any]]:
    """Refuse a second test look at the same checkpoint unless `again`; returns the earlier looks at it."""
    earlier = [look for look in read_ledger(run) if look["adapter_sha256"] == nomination["adapter"]["sha256"]]
    if earlier and not again:
        first = earlier[0]
        raise InputError(f"checkpoint {nomination['step']} was already looked at on test ({first['at']}, results "
                         f"{first['results']}): a second look turns the test split into a second validation "
                         "split. Pass --again to look anyway (recorded in test_looks.jsonl)", path=str(run),
                         field="split")
    return earlier


def record_test_look(run: str | Path, nomination: Mapping[str, Any], results_path: Path,
                     results: Mapping[str, Any], *, again: bool) -> dict[str, Any]:
    run = Path(run)
    entry = {"step": nomination["step"], "adapter_sha256": nomination["adapter"]["sha256"],
             "prompts_sha256": (results.get("prompts") or {}).get("sha256"),
             "reward": results.get("reward"), "protocol": results.get("protocol"),
             "results": str(results_path), "results_sha256": sha256_file(results_path), "again": again,
             "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    with open(run / LEDGER, "ab") as f:
        f.write(dumps_line(entry))
    return entry


def test_results(run: str | Path, prompts_sha256: str) -> dict[str, Any]:
    """The results of the nominated checkpoint's latest test look on these prompts (checked against the ledger's
    sha256), for the gate."""
    run = Path(run)
    nomination = nomination_of(run)
    looks = [look for look in read_ledger(run) if look["adapter_sha256"] == nomination["adapter"]["sha256"]
             and look["prompts_sha256"] == prompts_sha256]
    if not looks:
        raise InputError(f"no test result of the nominated checkpoint {nomination['step']} on these prompts: run "
                         f"`stateset-agents evaluate --run {run} --split test --prompts TEST.jsonl ...` first",
                         path=str(run))
    look = looks[-1]
    path = Path(look["results"])
    if not path.is_file() or sha256_file(path) != look["results_sha256"]:
        raise InputError("the recorded test results are missing or changed since the look", path=str(path))
    return {"look": look, "nomination": nomination, "results": load_json(path)}
