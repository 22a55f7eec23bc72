"""Checkpoint selection on the validation split: each checkpoint is evaluated on the validation prompts (paired
with the base model, under the evaluation protocol), and the result is kept beside it and in the run's
``checkpoint_validation.jsonl``. The test split is never looked at here: a person nominates a checkpoint
(`stateset-agents nominate`), and `evaluate --split test` looks at it once.

The evaluation must not change training: the RNG state is saved before and restored after, so a run with
validation draws the same samples as one without, and a resumed run continues exactly. The base model's answers
do not change between checkpoints (the adapter is off), so they are computed once per process.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from stateset_agents.core.jsonio import dumps_line, load_json, sha256_file, write_json
from stateset_plugins.models.evaluation import EvalProtocol, evaluate, side_answers
from stateset_plugins.models.seeding import rng_state, set_rng_state

from .rundir import RunDir

CHECKPOINT_RESULTS = "validation_results.json"  # in each checkpoint directory
VALIDATION_LOG = "checkpoint_validation.jsonl"  # in the run directory, one line per evaluated checkpoint


def summary_of(results: Mapping[str, Any]) -> dict[str, Any]:
    totals, s, trunc = results["totals"], results["statistics"], results.get("truncation") or {}
    return {"cases": totals["cases"], "base_mean": totals["base_mean"], "candidate_mean": totals["candidate_mean"],
            "mean_difference": s["mean_difference"], "interval": s.get("interval"), "p_value": s.get("p_value"),
            "improved": totals["improved"], "regressed": totals["regressed"],
            "truncated": {"base": trunc.get("base"), "candidate": trunc.get("candidate")}}


class CheckpointValidator:
    def __init__(self, backend, renderer, reward, cases: Sequence[dict[str, Any]], protocol: EvalProtocol,
                 split: str | None, prompts_sha256: str | None = None):
        self.backend, self.renderer, self.reward, self.cases = backend, renderer, reward, list(cases)
        self.protocol, self.split, self.prompts_sha256 = protocol, split, prompts_sha256
        self._base: list[dict[str, Any]] | None = None

    def evaluate(self) -> dict[str, Any]:
        """The current adapter on the validation cases; the training RNG state is left as it was."""
        saved = rng_state()
        try:
            if self._base is None:
                self._base = side_answers(self.backend, self.renderer, self.reward, self.cases, self.protocol, False)
            results = evaluate(self.backend, self.renderer, self.reward, self.cases, self.protocol,
                               base_answers=self._base)
        finally:
            set_rng_state(saved)
        results["split"] = self.split or "unspecified"
        results["prompts"] = {"sha256": self.prompts_sha256, "cases": len(self.cases), "split": self.split}
        return results

    def at_checkpoint(self, run_dir: RunDir, step: int, path: Path) -> dict[str, Any]:
        results = self.evaluate()
        write_json(path / CHECKPOINT_RESULTS, results)
        record = {"step": step, "split": results["split"],
                  "adapter_sha256": sha256_file(path / "adapter" / "adapter_model.safetensors"),
                  **summary_of(results)}
        append_record(run_dir, record)
        return {"record": record, "results": results}


def append_record(run_dir: RunDir, record: Mapping[str, Any]) -> None:
    with open(run_dir.path / VALIDATION_LOG, "ab") as f:
        f.write(dumps_line(dict(record)))


def read_records(run_path: str | Path) -> list[dict[str, Any]]:
    """Every checkpoint's validation record, latest per step, in step order."""
    import orjson

    path = Path(run_path) / VALIDATION_LOG
    if not path.exists():
        return []
    by_step: dict[int, dict[str, Any]] = {}
    for raw in path.read_bytes().splitlines():
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue  # a partial last line of a killed run
        by_step[int(rec["step"])] = rec
    return [by_step[k] for k in sorted(by_step)]


def truncate_records(run_path: str | Path, step: int) -> None:
    """On resume, keep the records of checkpoints up to the one resumed from."""
    kept = [r for r in read_records(run_path) if r["step"] <= step]
    from stateset_agents.core.jsonio import atomic_write

    with atomic_write(Path(run_path) / VALIDATION_LOG) as f:
        f.write(b"".join(dumps_line(r) for r in kept))


def best_step(records: Sequence[Mapping[str, Any]]) -> int | None:
    """The checkpoint with the highest validation mean (ties: the earliest). Descriptive: what a person would
    nominate by validation; `nominate` records the choice."""
    if not records:
        return None
    return max(records, key=lambda r: (r["candidate_mean"], -r["step"]))["step"]


def checkpoint_table(run_path: str | Path) -> list[dict[str, Any]]:
    """The manifest's `checkpoints`: each validated step, whether its directory is still kept, and its result."""
    run = RunDir(run_path)
    kept = {int(p.name.split("-")[1]) for p in run.checkpoint_dirs()}
    return [{**r, "kept": r["step"] in kept} for r in read_records(run_path)]


def load_checkpoint_results(run_path: str | Path, step: int) -> dict[str, Any] | None:
    path = Path(run_path) / "checkpoints" / f"step-{step:06d}" / CHECKPOINT_RESULTS
    return load_json(path) if path.exists() else None
