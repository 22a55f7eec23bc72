"""Plans: a private workspace holding a snapshot of the dataset and config, and `plan.json` bound by a checksum.

    WORKSPACE/ (0700)
        dataset.jsonl, eval_prompts.<ext>   byte copies of the inputs
        parent/adapter/, parent/manifest.json  with --init-adapter: the parent's adapter files and its manifest
        resume/step-K/                      with `finetune prepare-resume`: the parent run's checkpoint K
        config.json                         the validated config, paths rewritten to the snapshots
        plan.json                           run id, provider, GPU, image + digest, hours, quote, worst case, checksum

The run id is a digest of what defines the job (dataset and eval sha256, config, provider, GPU type and count, image
digest, max hours, and the --new-run salt), never of the quote or the cap: the same job always gets the same id, so a
retried launch finds the job it already created instead of renting a second machine.
"""
from __future__ import annotations

import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from ..core.errors import InputError
from ..core.jsonio import digest, load_json, sha256_file, write_json
from ..plugin_api.jobs import PLAN_FILE, private_dir

PLAN_VERSION = 1
#: config keys that do not define the job (the cap is a budget, not part of the work)
_NOT_IDENTITY = ("max_cost_usd", "dataset", "eval_prompts", "init_adapter")
PARENT_DIR = "parent"
RESUME_DIR = "resume"


def run_id_for(config: Mapping[str, Any], *, dataset_sha256: str, eval_sha256: str | None, gpu_id: str,
               image_digest: str | None, init_adapter_sha256: str | None = None) -> str:
    identity = {
        "dataset_sha256": dataset_sha256, "eval_sha256": eval_sha256,
        "config": {k: v for k, v in config.items() if k not in _NOT_IDENTITY and not (k == "eval" and not v)},
        "provider": config["provider"], "gpu": gpu_id, "gpus": config["gpus"], "image_digest": image_digest,
        "max_hours": config["max_hours"],
    }
    if init_adapter_sha256:  # only then: the ids of jobs without a parent stay what they were
        identity["init_adapter_sha256"] = init_adapter_sha256
    return "sa-" + digest(identity)[:20]


def job_identity(config: Mapping[str, Any], inputs: Mapping[str, Any], *, gpu_id: str,
                 image_digest: str | None) -> str:
    """The run id this job would have without --new-run's salt: what the runs of the same job share (siblings)."""
    return run_id_for({k: v for k, v in config.items() if k != "salt"},
                      dataset_sha256=inputs["dataset"]["sha256"],
                      eval_sha256=(inputs.get("eval_prompts") or {}).get("sha256"), gpu_id=gpu_id,
                      image_digest=image_digest, init_adapter_sha256=(inputs.get("init_adapter") or {}).get("sha256"))


def plan_checksum(plan: Mapping[str, Any]) -> str:
    return digest({k: v for k, v in plan.items() if k != "checksum"})


def snapshot_inputs(config: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """Copy the dataset (and held-out prompts) into the workspace; returns their identities."""
    private_dir(workspace)
    out: dict[str, Any] = {}
    for key, stem in (("dataset", "dataset"), ("eval_prompts", "eval_prompts")):
        src = config.get(key)
        if not src:
            continue
        src_path = Path(src)
        if not src_path.is_file():
            raise InputError("file not found", path=str(src), field=key)
        name = stem + "".join(src_path.suffixes[-2:]) if stem == "eval_prompts" else "dataset.jsonl"
        shutil.copyfile(src_path, workspace / name)
        out[key] = {"file": name, "sha256": sha256_file(workspace / name), "source": str(src)}
    if config.get("init_adapter"):
        src_dir = Path(config["init_adapter"])
        weights = src_dir / "adapter_model.safetensors"
        if not weights.is_file():
            raise InputError("not an adapter directory (no adapter_model.safetensors)", path=str(src_dir),
                             field="init_adapter")
        target = workspace / PARENT_DIR / "adapter"
        if target.parent.exists():
            shutil.rmtree(target.parent)
        target.mkdir(parents=True)
        # one input per file (the bundle carries files): the weights under "init_adapter", the rest beside them
        copies = [(f, target / f.name) for f in sorted(src_dir.iterdir()) if f.is_file()]
        if (src_dir.parent / "manifest.json").is_file():  # the parent's lineage travels with it
            copies.append((src_dir.parent / "manifest.json", target.parent / "manifest.json"))
        for src_file, dst in copies:
            shutil.copyfile(src_file, dst)
            key = "init_adapter" if dst.name == weights.name else f"init_adapter/{dst.relative_to(target.parent)}"
            out[key] = {"file": str(dst.relative_to(workspace)), "sha256": sha256_file(dst), "source": str(src_file)}
    return out


def write_plan(workspace: Path, config: Mapping[str, Any], inputs: Mapping[str, Any], *, gpu_id: str,
               image: Mapping[str, Any], quote: Mapping[str, Any], worst_case_usd: float) -> dict[str, Any]:
    run_id = run_id_for(config, dataset_sha256=inputs["dataset"]["sha256"],
                        eval_sha256=(inputs.get("eval_prompts") or {}).get("sha256"), gpu_id=gpu_id,
                        image_digest=image.get("digest"),
                        init_adapter_sha256=(inputs.get("init_adapter") or {}).get("sha256"))
    identity = job_identity(config, inputs, gpu_id=gpu_id, image_digest=image.get("digest"))
    snap_config = {**config, "dataset": inputs["dataset"]["file"],
                   "eval_prompts": (inputs.get("eval_prompts") or {}).get("file"),
                   "init_adapter": f"{PARENT_DIR}/adapter" if inputs.get("init_adapter") else None}
    write_json(workspace / "config.json", snap_config)
    now = time.time()
    plan = {
        "plan_version": PLAN_VERSION, "run_id": run_id, "provider": config["provider"],
        "gpu": {"id": gpu_id, "count": config["gpus"]}, "image": dict(image), "max_hours": config["max_hours"],
        "max_cost_usd": config["max_cost_usd"], "quote": dict(quote), "worst_case_usd": worst_case_usd,
        "inputs": dict(inputs), "config_sha256": digest(snap_config), "config": snap_config,
        "created_at": now, "created_at_iso": datetime.fromtimestamp(now, timezone.utc).isoformat(),
        "job_identity": identity,
    }
    if config.get("resume"):
        plan["resume"] = {k: config["resume"].get(k) for k in ("mode", "parent_run_id", "checkpoint_step",
                                                               "checkpoint_sha256")}
    plan["checksum"] = plan_checksum(plan)
    write_json(workspace / PLAN_FILE, plan)
    return plan


def copy_inputs(parent_workspace: Path, parent_plan: Mapping[str, Any], workspace: Path) -> dict[str, Any]:
    """The parent plan's input snapshots, copied byte for byte into a new workspace (checked against the plan)."""
    private_dir(workspace)
    out: dict[str, Any] = {}
    for key, ident in (parent_plan.get("inputs") or {}).items():
        if key.startswith(RESUME_DIR + "/"):
            continue  # a resumed parent's own checkpoint is not the child's
        src, dst = Path(parent_workspace) / ident["file"], workspace / ident["file"]
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        if sha256_file(dst) != ident["sha256"]:
            raise InputError(f"the parent's {key} snapshot changed after its prepare", path=str(src), field=key)
        out[key] = dict(ident)
    return out


#: an exact continuation's run records up to its checkpoint (the trainer truncates them to it on resume), so the
#: continued run holds the whole history: every committed update's metrics and receipt
RUN_RECORDS = ("metrics.jsonl", "receipts.jsonl", "checkpoint_validation.jsonl")


def snapshot_checkpoint(checkpoint: Path, workspace: Path, *, records: Path | None = None) -> tuple[str, dict[str, Any]]:
    """Copy checkpoint directory `checkpoint` (RUN/checkpoints/step-K) into WORKSPACE/resume/step-K, and with
    `records` (the run directory) its RUN_RECORDS into WORKSPACE/resume/run/, one plan input per file so the bundle
    carries them; returns (the checkpoint's path in the workspace, the inputs)."""
    target = workspace / RESUME_DIR / checkpoint.name
    for old in (target, workspace / RESUME_DIR / "run"):
        if old.exists():
            shutil.rmtree(old)
    pairs = [(src, target / src.relative_to(checkpoint)) for src in sorted(checkpoint.rglob("*")) if src.is_file()]
    if records is not None:
        pairs += [(records / n, workspace / RESUME_DIR / "run" / n) for n in RUN_RECORDS if (records / n).is_file()]
    out: dict[str, Any] = {}
    for src, dst in pairs:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        rel = dst.relative_to(workspace).as_posix()
        out[rel] = {"file": rel, "sha256": sha256_file(dst), "source": str(src)}
    return target.relative_to(workspace).as_posix(), out


def load_verified(workspace: str | Path) -> dict[str, Any]:
    """The plan, refused if it or any snapshot changed since `prepare` wrote it."""
    workspace = Path(workspace)
    plan = load_json(workspace / PLAN_FILE)
    where = str(workspace / PLAN_FILE)
    if plan.get("checksum") != plan_checksum(plan):
        raise InputError("the plan was edited after prepare (checksum mismatch); run `finetune prepare` again",
                         path=where, field="checksum")
    for key, ident in (plan.get("inputs") or {}).items():
        path = workspace / ident["file"]
        if not path.is_file() or sha256_file(path) != ident["sha256"]:
            raise InputError(f"the {key} snapshot changed after prepare; run `finetune prepare` again",
                             path=str(path), field=key)
    if load_json(workspace / "config.json") != plan["config"]:
        raise InputError("config.json was edited after prepare; run `finetune prepare` again",
                         path=str(workspace / "config.json"))
    return plan
