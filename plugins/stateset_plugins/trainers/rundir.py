"""The run directory and its checkpoints.

    RUN/adapter/           PEFT safetensors of the final adapter (PeftModel.from_pretrained loads it)
    RUN/checkpoints/step-000010/
        adapter/           the adapter at that committed update
        training_state.pt  optimizer, scheduler, RNG states (python, numpy, torch; on N ranks every rank's, in
                           "rank_rng", and state.json says "world_size")
        state.json         step, data cursor, config and its digest, dataset and base-model identity, "files"
                           (the sha256 of every file above), "learner_state" (what it holds), "code" (versions)
        validation_results.json  the checkpoint on the validation prompts (when train was given them)
    RUN/metrics.jsonl      one line per committed update
    RUN/receipts.jsonl     one line per attempted update (`receipts`); RUN/quarantine.json while quarantined
    RUN/checkpoint_validation.jsonl  one line per validated checkpoint (`selection`)
    RUN/nomination.json, RUN/test_looks.jsonl, RUN/test/step-K/  the nominated checkpoint and its test looks
    RUN/eval_results.json, RUN/manifest.json

A checkpoint is built in a hidden temporary directory and renamed into place, so a kill leaves only whole
checkpoints; single files go through `jsonio.atomic_write`.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import orjson
import torch

from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import atomic_write, dumps_line, load_json, replace_directory, write_json
from stateset_agents.plugin_api.checkpoints import (LEARNER_STATE, QUARANTINE_FILE, RECEIPTS_FILE, RESOLVED_PREFIX,
                                                    checkpoint_files, latest_complete, quarantine)
from stateset_plugins.models.seeding import rng_state, set_rng_state

RUN_MARKERS = ("manifest.json", "checkpoints", "metrics.jsonl", "adapter", RECEIPTS_FILE, QUARANTINE_FILE)
#: What a run writes besides its markers; --overwrite removes these too, so nothing of the old run survives.
RUN_RECORDS = ("eval_results.json", "tensorboard", "checkpoint_validation.jsonl", "nomination.json",
               "test_looks.jsonl", "test")



def _numpy_rng_globals() -> list:
    """What numpy's RNG state (an ndarray of uint32 in `rng_state`) needs unpickled, and nothing else."""
    import numpy as np

    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]  # numpy's _reconstruct, wherever this numpy keeps it
    return [np.ndarray, np.dtype, reconstruct, type(np.dtype(np.uint32))]


def load_training_state(path: Path) -> dict[str, Any]:
    """A checkpoint's training state: torch.load with weights_only=True (tensors, containers, numbers, strings
    and numpy's RNG arrays only), so a planted training_state.pt cannot run code when a run resumes."""
    with torch.serialization.safe_globals(_numpy_rng_globals()):
        return torch.load(path, weights_only=True)


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.checkpoints = self.path / "checkpoints"
        self.metrics_path = self.path / "metrics.jsonl"

    def holds_run(self) -> bool:
        return any((self.path / m).exists() for m in RUN_MARKERS)

    def check(self, *, resume: bool, overwrite: bool, reload: bool = False) -> None:
        """Refuse to mix runs: an existing run needs --resume (continue it) or --overwrite (replace it). A
        quarantined run resumes only with --reload (the latest complete checkpoint, verified file by file)."""
        if (resume or reload) and overwrite:
            raise InputError(f"--{'reload' if reload else 'resume'} and --overwrite exclude each other",
                             path=str(self.path))
        if reload:
            if latest_complete(self.path) is None:
                raise InputError("--reload: no complete checkpoint (full learner state, every file matching its "
                                 "recorded sha256) to restore; --overwrite starts the run over",
                                 path=str(self.checkpoints))
            return
        record = quarantine(self.path) if resume else None
        if record is not None:
            raise InputError(f"the run is quarantined ({record.get('reason')} at update {record.get('step')}: "
                             f"{record.get('message')}): its state may hold a partial update, so --resume is "
                             "refused. Rerun the same command with --reload instead of --resume: it restores the "
                             f"latest complete checkpoint after verifying every file (last good: "
                             f"{record.get('last_good_checkpoint')})", path=str(self.path / QUARANTINE_FILE))
        if resume and self.latest_checkpoint() is None:
            raise InputError("--resume: no checkpoint to resume from (refusing to start fresh)", path=str(self.path))
        if not resume and not overwrite and self.holds_run():
            raise InputError("the output directory already holds a run; pass --resume to continue it or "
                             "--overwrite to replace it", path=str(self.path))

    def prepare(self, *, resume: bool, overwrite: bool, reload: bool = False) -> None:
        self.check(resume=resume, overwrite=overwrite, reload=reload)
        if resume or reload:
            return
        if overwrite and self.holds_run():
            resolved = [p.name for p in self.path.glob(f"{RESOLVED_PREFIX}*.json")]
            for name in (*RUN_MARKERS, *RUN_RECORDS, *resolved):
                target = self.path / name
                if target.is_dir():
                    shutil.rmtree(target)
                elif target.exists():
                    target.unlink()
        self.path.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------------------------------- checkpoints
    def checkpoint_dirs(self) -> list[Path]:
        if not self.checkpoints.is_dir():
            return []
        found = [p for p in self.checkpoints.iterdir() if p.name.startswith("step-") and (p / "state.json").exists()]
        return sorted(found, key=lambda p: int(p.name.split("-")[1]))

    def latest_checkpoint(self) -> Path | None:
        dirs = self.checkpoint_dirs()
        return dirs[-1] if dirs else None

    def save_checkpoint(self, step: int, backend, state: dict[str, Any], keep: int,
                        protect: frozenset[int] | set[int] = frozenset(), rank_rng: list | None = None) -> Path:
        """Write checkpoint `step` and delete all but the `keep` most recent, except the steps in `protect` (the
        best one on validation so far, which a person may still nominate)."""
        final = self.checkpoints / f"step-{step:06d}"
        tmp = self.checkpoints / f".step-{step:06d}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        backend.save_adapter(tmp / "adapter")
        blob = {**backend.training_state(), "rng": rng_state()}
        if rank_rng is not None:  # N ranks: each rank's sampling stream, in rank order (rank 0's is "rng" too)
            blob["rank_rng"] = list(rank_rng)
        with atomic_write(tmp / "training_state.pt") as f:
            torch.save(blob, f)
        state = {**state, "committed_updates": step, "learner_state": learner_state(blob, state),
                 "files": checkpoint_files(tmp)}
        write_json(tmp / "state.json", state)  # written last: its presence marks a whole checkpoint
        replace_directory(tmp, final)
        for old in self.checkpoint_dirs()[:-keep]:
            if int(old.name.split("-")[1]) not in protect:
                shutil.rmtree(old, ignore_errors=True)
        return final

    @staticmethod
    def load_checkpoint(path: Path, backend, rank: int = 0, world_size: int = 1) -> dict[str, Any]:
        """Load a checkpoint into the backend and the RNGs (rank `rank`'s of a `world_size`-rank run): the adapter
        first, then the training state. A failure after the adapter is loaded leaves a mixed state (the caller
        quarantines the run)."""
        state = load_json(path / "state.json")
        backend.load_adapter(path / "adapter")
        blob = load_training_state(path / "training_state.pt")
        backend.load_training_state(blob)
        streams = blob.get("rank_rng")
        if world_size > 1 and (not streams or len(streams) != world_size):
            raise ValueError(f"{path.name} holds the RNG state of {len(streams or [1])} rank(s), not {world_size}")
        set_rng_state(streams[rank] if world_size > 1 else blob["rng"])
        return state

    # --------------------------------------------------------------------------------------------- metrics
    def append_metrics(self, record: dict[str, Any]) -> None:
        # one write(2) of a whole line on an O_APPEND descriptor: a kill leaves at most one partial last line,
        # which `truncate_metrics` drops on resume
        fd = os.open(self.metrics_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, dumps_line(record))
        finally:
            os.close(fd)

    def truncate_metrics(self, step: int) -> None:
        """On resume, keep only the metrics of updates the checkpoint holds."""
        if not self.metrics_path.exists():
            return
        kept = []
        for raw in self.metrics_path.read_bytes().splitlines():
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if rec.get("step", 0) <= step:
                kept.append(dumps_line(rec))
        with atomic_write(self.metrics_path) as f:
            f.write(b"".join(kept))

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        return [orjson.loads(r) for r in self.metrics_path.read_bytes().splitlines() if r.strip()]

    # --------------------------------------------------------------------------------------------- adapter
    def write_adapter(self, backend) -> Path:
        final, tmp = self.path / "adapter", self.path / ".adapter.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        backend.save_adapter(tmp)
        replace_directory(tmp, final)  # a kill leaves the old adapter or the new one, never none
        return final


def learner_state(blob: dict[str, Any], state: dict[str, Any]) -> list[str]:
    """Which parts of the learner a checkpoint holds (`plugin_api.checkpoints.LEARNER_STATE`, plus a value head): a
    backend whose training state is its own (a hosted one) lists them under "learner_state"; otherwise the keys
    say."""
    declared = blob.get("learner_state")
    held = ["adapter", *(declared if isinstance(declared, (list, tuple)) else
                         [k for k in ("optimizer", "scheduler") if k in blob])]
    held += ["rng"] if "rng" in blob else []
    held += ["data_cursor"] if "cursor" in state else []
    held += ["value_head"] if "value_head" in blob else []
    return [k for k in dict.fromkeys(held) if k in LEARNER_STATE or k == "value_head"]
