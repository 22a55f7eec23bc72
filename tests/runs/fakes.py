"""A small in-test provider: jobs are dicts, `launch` can lose its answer (the client dies after the provider
created the job), and a run's collected directory with checkpoints in the trainer's on-disk format."""
from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from stateset_agents import Provider


class ClientDied(BaseException):
    """What the client sees when it dies between provider.launch returning and the record being saved."""


class TableProvider(Provider):
    name = "local"  # plans name their provider; the tests open this object directly
    version = "0.0.1"

    def __init__(self, config=None, *, rate: float = 1.0, cooperative: bool = True):
        super().__init__(config)
        self.rate, self.cooperative = rate, cooperative
        self.jobs: dict[str, dict[str, Any]] = {}
        self.creates = 0
        self.die_after_create = False
        self.stops: list[str] = []
        self.log = b""

    def quote(self, plan):
        return {"provider": "local", "gpu": "cpu", "usd_per_gpu_hour": self.rate, "storage_usd": 0.0, "priced": True,
                "source": "test table", "quoted_at": time.time(), "image": {"name": "t", "digest": "sha256:" + "0" * 64}}

    def launch(self, plan):
        run_id = plan["run_id"]
        if run_id in self.jobs:
            return {**self.jobs[run_id]["meta"], "attached": True}
        self.creates += 1
        meta = {"job_id": f"job-{self.creates}", "created_at": time.time(), "deadline_at": time.time() + 3600}
        self.jobs[run_id] = {"meta": meta, "state": "running"}
        if self.die_after_create:
            self.die_after_create = False
            raise ClientDied()
        return {**meta, "attached": False}

    def status(self, run_id):
        job = self.jobs.get(run_id)
        if job is None:
            return {"run_id": run_id, "state": "missing", "uptime_s": 0, "cost_per_hour": 0.0}
        return {"run_id": run_id, "state": job["state"], "uptime_s": 60.0, "cost_per_hour": self.rate,
                **job["meta"]}

    def terminate(self, run_id):
        job = self.jobs.get(run_id)
        if job is None or job["state"] != "running":
            return {"run_id": run_id, "terminated": False}
        job["state"] = "terminated"
        return {"run_id": run_id, "terminated": True}

    def list_jobs(self):
        return [{"run_id": r, **self.status(r)} for r, j in self.jobs.items() if j["state"] == "running"]

    def stop(self, run_id):
        if not self.cooperative:
            raise NotImplementedError
        self.stops.append(run_id)
        return {"run_id": run_id, "requested": run_id in self.jobs}

    def logs(self, request):
        offset = int(request.get("offset") or 0)
        part = self.log[offset:offset + int(request.get("length") or 7)]
        return {"data_b64": base64.b64encode(part).decode(), "offset": offset + len(part),
                "eof": offset + len(part) >= len(self.log)}


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_checkpoint(run_dir: Path, step: int, *, dataset_sha256: str, base_model: str, algorithm: str = "sft",
                     learner_state=("adapter", "optimizer", "scheduler", "rng", "data_cursor")) -> Path:
    """A checkpoint as the trainer writes it: the files, then state.json recording their sha256 and what it holds."""
    path = run_dir / "checkpoints" / f"step-{step:06d}"
    (path / "adapter").mkdir(parents=True)
    (path / "adapter" / "adapter_model.safetensors").write_bytes(b"weights-%d" % step)
    (path / "adapter" / "adapter_config.json").write_text("{}")
    (path / "training_state.pt").write_bytes(b"optimizer-%d" % step)
    files = {p.relative_to(path).as_posix(): sha(p) for p in sorted(path.rglob("*")) if p.is_file()}
    (path / "state.json").write_text(json.dumps({
        "step": step, "committed_updates": step, "files": files, "learner_state": list(learner_state),
        "dataset_sha256": dataset_sha256, "algorithm": algorithm, "config_digest": "c" * 64,
        "base_model": {"source": "hub", "id": base_model}, "code": {"stateset-agents": "test"}}))
    return path
