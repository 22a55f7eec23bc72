"""`provider:localcmd`: each job runs through a command on this machine, under `--max-cost`.

The command is the kernel's job worker by default (`python -m stateset_agents.remote.worker run JOB_DIR`), or any
argv that ends up running it: `nice`, `taskset`, `systemd-run --scope`, `ssh box ...` with a shared directory.
`{python}` and `{job}` in it become this Python and the job's directory. You say what an hour of this machine costs
(`usd_per_hour`), so the kernel's cap means something: it refuses a job whose worst case is above the cap, its
watchdog terminates one before the cap, and the job itself stops where its spend would reach the cap, even if no
client is watching (the supervisor, `supervise.py`, kills the command at that deadline).

Jobs live in JOBS/RUN_ID/ (default: the kernel's state directory, `localcmd/jobs`): the unpacked workspace,
job.json (what the job is), process.json (the supervisor's pid), exit.json (how the command ended), and what the
worker writes there (status.json, events.jsonl, run/, receipt.json). `stop` is cooperative: the worker's stop file
in the job directory (it saves a full checkpoint at the next safe boundary and ends, state stopped); `logs` reads
events.jsonl from an offset; `status` passes the worker's checkpoints, quarantine record and stop request through.
"""
from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from stateset_agents import Provider
from stateset_agents.core.errors import InputError
from stateset_agents.core.jsonio import digest, load_json, write_json
from stateset_agents.plugin_api import jobs

GRACE_S = 10.0  # from SIGTERM to SIGKILL, in the supervisor and in terminate
DEFAULT_COMMAND = ["{python}", "-m", jobs.WORKER_MODULE, "run", "{job}"]
REPORTED = ("checkpoints", "quarantined", "stop_requested")  # the worker's run-control fields in status.json
LOG_SLICE = 1 << 20


class LocalCommandProvider(Provider):
    name, version = "localcmd", "0.1.0"
    capabilities = ("quote", "idempotent_launch", "remote_deadline", "artifact_receipts")
    config_schema = {
        "type": "object", "additionalProperties": False,
        "properties": {
            "command": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                        "description": "argv of the job; {python} and {job} are filled in"},
            "usd_per_hour": {"type": "number", "minimum": 0, "description": "what an hour of this machine costs"},
            "device": {"type": "string", "minLength": 1, "description": "the one --gpu it offers (default cpu)"},
            "jobs_dir": {"type": "string", "minLength": 1},
        },
    }

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        self.command = list(self.config.get("command") or DEFAULT_COMMAND)
        self.rate = float(self.config.get("usd_per_hour", 0.0))
        self.device = self.config.get("device", "cpu")
        self._children: dict[str, subprocess.Popen] = {}

    @property
    def root(self) -> Path:
        return Path(self.config.get("jobs_dir") or jobs.state_dir() / self.name / "jobs")

    def _job(self, run_id: str) -> Path:
        if not run_id or "/" in run_id or run_id.startswith("."):
            raise InputError(f"not a run id: {run_id!r}", field="run_id")
        return self.root / run_id

    # ------------------------------------------------------------------------------------------------- quote
    def quote(self, plan):
        gpu = plan.get("gpu") or self.device
        if gpu.lower() != self.device.lower():
            raise InputError(f"provider:localcmd offers one device, {self.device!r} (set `device` in "
                             f"provider_config), not {gpu!r}", field="gpu")
        now = time.time()
        # the image identity is the command template: another command is another job (another run id)
        image = {"name": "localcmd", "digest": "sha256:" + digest({"command": self.command})}
        return {"provider": self.name, "gpu": self.device, "priced": True, "usd_per_gpu_hour": self.rate,
                "storage_usd": 0.0, "source": "provider_config.usd_per_hour", "quoted_at": now,
                "quoted_at_iso": datetime.fromtimestamp(now, timezone.utc).isoformat(), "currency": "USD",
                "image": image}

    # ------------------------------------------------------------------------------------------------ launch
    def launch(self, plan):
        run_id = plan["run_id"]
        job = self._job(run_id)
        if (job / "job.json").exists():  # the same plan again: attach, never a second job
            return {**load_json(job / "job.json"), "attached": True}
        if not plan.get("max_cost_usd"):
            raise InputError("the plan carries no cap (max_cost_usd)", field="max_cost_usd")
        staging = self.root / f".{run_id}.creating"
        shutil.rmtree(staging, ignore_errors=True)
        jobs.unpack_bundle(plan["bundle"], staging)
        created = time.time()
        gpus = int((plan.get("gpu") or {}).get("count") or 1)
        deadline = created + float(plan["max_hours"]) * 3600.0
        if self.rate > 0:  # stop where the spend would reach the cap, with room for the kill to land
            deadline = min(deadline, created + float(plan["max_cost_usd"]) / (self.rate * gpus) * 3600.0 - GRACE_S)
        argv = [part.replace("{python}", sys.executable).replace("{job}", str(job)) for part in self.command]
        meta = {"run_id": run_id, "job_id": f"{self.name}-{run_id}", "created_at": created, "deadline_at": deadline,
                "gpus": gpus, "cost_per_hour": self.rate * gpus, "command": argv}
        write_json(staging / "job.json", meta)
        os.replace(staging, job)  # the job exists only once whole: a retry sees all of it or none
        env = {**os.environ, jobs.DEADLINE_ENV: str(deadline), jobs.RUN_ID_ENV: run_id, jobs.JOB_DIR_ENV: str(job)}
        with open(job / "command.log", "ab") as log:
            child = subprocess.Popen([sys.executable, "-m", "stateset_provider_localcmd.supervise", str(job)],
                                     env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # outlives this process; its group is the job
        self._children[run_id] = child
        write_json(job / "process.json", {"pid": child.pid})
        return {**meta, "attached": False}

    # ------------------------------------------------------------------------------------------------ status
    def _alive(self, run_id: str, pid: int) -> bool:
        child = self._children.get(run_id)
        if child is not None:
            return child.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def status(self, run_id):
        job = self._job(run_id)
        if not (job / "job.json").exists():
            return {"run_id": run_id, "state": "missing", "uptime_s": 0, "cost_per_hour": 0.0}
        if run_id in self._children:
            self._children[run_id].poll()  # reap our own child, so a finished job leaves no zombie
        meta = load_json(job / "job.json")
        ended = load_json(job / "exit.json") if (job / "exit.json").exists() else None
        pid = (load_json(job / "process.json") if (job / "process.json").exists() else {}).get("pid")
        message = None
        if ended is None and pid is None:  # launched, the supervisor's pid not yet written
            state = "pending" if time.time() - meta["created_at"] < 60 else "failed"
            message = None if state == "pending" else "the supervisor never started (see command.log)"
        elif ended is None and self._alive(run_id, pid):
            state = "running"
        elif ended is None:
            if (job / "exit.json").exists():  # it ended between the two looks
                return self.status(run_id)
            state, message = "failed", "the supervisor died (see command.log)"
        else:
            state, message = self._final_state(job, ended)
        end = (ended or {}).get("finished_at") or time.time()
        uptime = max(0.0, end - meta["created_at"])
        progress = load_json(job / "status.json") if (job / "status.json").exists() else {}
        return {"run_id": run_id, "job_id": meta["job_id"], "state": state, "message": message, "uptime_s": uptime,
                "cost_per_hour": meta["cost_per_hour"], "spend_usd": round(meta["cost_per_hour"] * uptime / 3600, 6),
                "step": progress.get("step"), "total": progress.get("total"), "deadline_at": meta["deadline_at"],
                **{k: progress[k] for k in REPORTED if k in progress},
                **({"stop_requested": True} if state == "running" and (job / jobs.STOP_FILE).exists() else {})}

    @staticmethod
    def _final_state(job: Path, ended: Mapping[str, Any]) -> tuple[str, str | None]:
        if ended["reason"] == "terminated":
            return "terminated", "terminated on request"
        if ended["reason"] == "deadline":
            return "terminated", "stopped at its deadline (where its spend reaches the cap, or --max-hours)"
        receipt = load_json(job / "receipt.json") if (job / "receipt.json").exists() else None
        if receipt is None:  # the command must run the kernel's worker, which writes one
            return "failed", f"the command exited with code {ended['returncode']} and wrote no receipt.json"
        if receipt.get("state") == "succeeded" and ended["returncode"] == 0:
            return "succeeded", None
        if receipt.get("state") == "stopped":  # a stop honoured: the checkpoint is there to collect
            return "stopped", (receipt.get("final_event") or {}).get("message") or "stopped on request"
        return "failed", (receipt.get("final_event") or {}).get("message") or f"exit code {ended['returncode']}"

    def terminate(self, run_id):
        job = self._job(run_id)
        if self.status(run_id)["state"] != "running":
            return {"run_id": run_id, "terminated": False}
        pid = int(load_json(job / "process.json")["pid"])
        try:
            os.killpg(pid, signal.SIGTERM)  # the supervisor leads the job's process group: all of it goes
            for _ in range(int(GRACE_S * 10)):
                if not self._alive(run_id, pid):
                    break
                time.sleep(0.1)
            else:
                os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not (job / "exit.json").exists():
            write_json(job / "exit.json", {"reason": "terminated", "returncode": None, "finished_at": time.time()})
        return {"run_id": run_id, "terminated": True, "job_id": f"{self.name}-{run_id}"}

    def stop(self, run_id):
        """Cooperative: the worker's stop file in the job directory; nothing is killed."""
        job = self._job(run_id)
        if not (job / "job.json").exists():
            return {"run_id": run_id, "requested": False, "message": "no such job"}
        state = self.status(run_id)["state"]
        if state not in ("pending", "running"):
            return {"run_id": run_id, "requested": False, "message": f"the job is already {state}"}
        (job / jobs.STOP_FILE).touch()
        return {"run_id": run_id, "requested": True,
                "message": "the worker saves a full checkpoint after the current update and ends (state stopped)"}

    def logs(self, request):
        """Bytes of the job's events.jsonl from `offset` (none before the worker wrote any)."""
        path = self._job(request["run_id"]) / "events.jsonl"
        offset, length = max(0, int(request.get("offset") or 0)), int(request.get("length") or LOG_SLICE)
        if not path.is_file():
            return {"data_b64": "", "offset": offset, "eof": True}
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
            size = os.fstat(f.fileno()).st_size
        return {"data_b64": base64.b64encode(data).decode(), "offset": offset + len(data),
                "eof": offset + len(data) >= size}

    def list_jobs(self):
        if not self.root.is_dir():
            return []
        return [self.status(p.name) for p in sorted(self.root.iterdir()) if (p / "job.json").exists()]

    # --------------------------------------------------------------------------------------------- artifacts
    def artifacts(self, request):
        path = self._job(request["run_id"]) / "receipt.json"
        return load_json(path) if path.exists() else {"run_id": request["run_id"], "state": "missing", "files": []}

    def read_artifact(self, request):
        rel = jobs.safe_relpath(str(request["path"]))
        root = (self._job(request["run_id"]) / "run").resolve()
        target = (root / rel).resolve()
        if root not in target.parents or not target.is_file():  # a link out of run/ is no artifact either
            raise InputError("no such artifact", path=rel)
        offset, length = int(request.get("offset") or 0), int(request.get("length") or (1 << 20))
        with open(target, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        return {"data_b64": base64.b64encode(data).decode(), "eof": offset + len(data) >= target.stat().st_size}

    def chat_open(self, request):
        raise InputError("provider:localcmd runs training jobs only; chat with a run through a provider that "
                         "declares `chat`", field="provider")

    chat_turn = chat_open
