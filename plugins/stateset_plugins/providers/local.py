"""`provider:local`: the trainer on this machine, in a detached worker process, so `--attach` works after the CLI
exits and a Ctrl-C'd client does not take the job down with it.

Price table (documented, dated): local compute is not billed, so every entry is 0 USD/hour; the cap still applies
(it must be positive) so a plan moves between providers unchanged.

Jobs live in STATE/local/jobs/RUN_ID/: the unpacked workspace, job.json (created_at, deadline_at), and what the
worker writes (status.json, events.jsonl, run/, receipt.json, worker.log). `stop` writes the stop file there
(the worker saves at the next safe boundary and ends in state stopped); `logs` reads events.jsonl from an offset.

Chat sessions (`chat-remote`) are held by this process: `evaluator:chat` in a subprocess with the run's adapter
(River: a River session sampling the run's checkpoint), described in STATE/local/chats/SESSION_ID/chat.json so
`status`, `terminate` and `list_jobs` treat them as jobs. A session whose holder died died with it.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from stateset_agents import Provider
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import load_json, write_json
from stateset_agents.plugin_api.gpus import resolve_gpu
from stateset_agents.plugin_api.jobs import DEADLINE_ENV, RUN_ID_ENV, private_dir, state_dir, unpack_bundle, worker_argv

from . import VERSION, common

PRICES_AS_OF = "2025-01-01"
PRICES = {"cpu": 0.0, "local-gpu": 0.0}  # USD per device-hour
STARTUP_GRACE_S = 120.0  # a job whose worker never wrote status.json by then has failed


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie is dead
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


class LocalProvider(Provider):
    name = "local"
    version = VERSION

    def __init__(self, config: Mapping[str, Any] | None = None):
        super().__init__(config)
        self._children: dict[str, subprocess.Popen] = {}
        self._chats: dict[str, dict[str, Any]] = {}  # session id -> what this process holds for it

    @property
    def root(self) -> Path:
        return Path(self.config.get("jobs_dir") or state_dir() / "local" / "jobs")

    def _job(self, run_id: str) -> Path:
        if not run_id or "/" in run_id or "\\" in run_id or run_id.startswith("."):
            raise InputError(f"not a run id: {run_id!r}", field="run_id")  # it names a directory under root
        return self.root / run_id

    def quote(self, plan):
        offered = [{"id": k, "name": k} for k in PRICES]
        gpu = resolve_gpu(plan.get("gpu") or "cpu", offered, {"gpu": "local-gpu"}, provider="local")
        from importlib.metadata import version

        from stateset_agents.core.jsonio import digest

        ident = {"stateset-agents": version("stateset-agents"), "python": sys.version.split()[0]}
        return common.quote("local", gpu, PRICES[gpu], source=f"local price table as of {PRICES_AS_OF}",
                            image={"name": "local", "digest": "sha256:" + digest(ident)})

    def launch(self, plan):
        run_id = plan["run_id"]
        job = self._job(run_id)
        if (job / "job.json").exists():
            return {**load_json(job / "job.json"), "attached": True}
        staging = self.root / f".{run_id}.creating"
        shutil.rmtree(staging, ignore_errors=True)
        unpack_bundle(plan["bundle"], staging)
        created = time.time()
        meta = {"run_id": run_id, "job_id": f"local-{run_id}", "created_at": created,
                "deadline_at": common.deadline_for(plan, created)}
        self._prepare_job(staging, plan, meta)
        write_json(staging / "job.json", meta)
        os.replace(staging, job)  # the job exists only once whole: a retry sees all of it or none
        self._start_worker(job, {**os.environ, DEADLINE_ENV: str(meta["deadline_at"]), RUN_ID_ENV: run_id})
        return {**meta, "attached": False}

    def _prepare_job(self, staging: Path, plan: Mapping[str, Any], meta: dict[str, Any]) -> None:
        """Add what this provider's worker needs to the job before it appears (nothing, for local)."""

    def _start_worker(self, job: Path, env: Mapping[str, str]) -> None:
        with open(job / "worker.log", "ab") as log:
            self._children[job.name] = subprocess.Popen(
                worker_argv(job), env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def status(self, run_id):
        if self._is_chat(run_id):
            return self._chat_status(run_id)
        job = self._job(run_id)
        if not (job / "job.json").exists():
            return {"run_id": run_id, "state": "missing", "uptime_s": 0, "cost_per_hour": 0.0}
        child = self._children.get(run_id)
        if child is not None:
            child.poll()  # reap our own child so it does not linger as a zombie
        meta = load_json(job / "job.json")
        st = load_json(job / "status.json") if (job / "status.json").exists() else {}
        state, message = st.get("state", "pending"), st.get("message")
        now = time.time()
        if state == "running" and not _alive(int(st["pid"])):
            state, message = "failed", "the worker process died"
        elif state == "pending" and now - meta["created_at"] > STARTUP_GRACE_S:
            state, message = "failed", "the worker never started (see worker.log)"
        end = st.get("finished_at") or now
        return {"run_id": run_id, "job_id": meta["job_id"], "state": state, "message": message,
                "uptime_s": max(0.0, end - meta["created_at"]), "cost_per_hour": 0.0, "spend_usd": 0.0,
                "step": st.get("step"), "total": st.get("total"), "deadline_at": meta["deadline_at"],
                **common.reported(st, job if state in ("pending", "running") else None)}

    def stop(self, run_id):
        """Cooperative: the stop file in the job directory; the worker saves at the next safe boundary and ends."""
        if self._is_chat(run_id):
            return {"run_id": run_id, "requested": False, "message": "a chat session has nothing to save; "
                                                                     "terminate it"}
        known = (self._job(run_id) / "job.json").exists()
        return common.stop_job(self._job(run_id), self.status(run_id)["state"] if known else None)

    def logs(self, request):
        return common.read_log(self._job(request["run_id"]), request)

    def terminate(self, run_id):
        if self._is_chat(run_id):
            return self._chat_terminate(run_id)
        job = self._job(run_id)
        st = load_json(job / "status.json") if (job / "status.json").exists() else {}
        if st.get("state") != "running" or not _alive(int(st.get("pid", 0))):
            return {"run_id": run_id, "terminated": False}
        self._stop_worker(run_id, int(st["pid"]))
        current = load_json(job / "status.json")
        write_json(job / "status.json", {**current, "state": "terminated",
                                         "finished_at": current.get("finished_at") or time.time()})
        return {"run_id": run_id, "terminated": True}

    def _stop_worker(self, run_id: str, pid: int) -> None:
        self._kill_worker(run_id, pid)

    def _kill_worker(self, run_id: str, pid: int) -> None:
        os.killpg(pid, signal.SIGTERM)  # the worker leads its own session: its whole group goes
        for _ in range(100):
            if self._children.get(run_id):
                self._children[run_id].poll()
            if not _alive(pid):
                return
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)

    def list_jobs(self):
        jobs = [self.status(p.name) for p in sorted(self.root.iterdir()) if (p / "job.json").exists()] \
            if self.root.is_dir() else []
        chats = [self._chat_status(p.name) for p in sorted(self.chats_root.iterdir()) if (p / "chat.json").exists()] \
            if self.chats_root.is_dir() else []
        return jobs + [c for c in chats if c["state"] != "terminated"]

    def artifacts(self, request):
        path = self._job(request["run_id"]) / "receipt.json"
        return load_json(path) if path.exists() else {"run_id": request["run_id"], "state": "missing", "files": []}

    def read_artifact(self, request):
        return common.read_slice(self._job(request["run_id"]) / "run", request)

    # ------------------------------------------------------------------------------------------------------ chat
    @property
    def chats_root(self) -> Path:
        return Path(self.config.get("chats_dir") or state_dir() / self.name / "chats")

    def _is_chat(self, session_id: str) -> bool:
        return (self.chats_root / session_id / "chat.json").exists()

    def chat_open(self, request):
        session_id = request["session_id"]
        if session_id in self._chats:
            return {**load_json(self.chats_root / session_id / "chat.json"), "attached": True}
        created = time.time()
        meta = {"session_id": session_id, "run_id": request["run_id"], "job_id": f"{self.name}-{session_id}",
                "created_at": created, "deadline_at": created + float(request["max_minutes"]) * 60.0,
                "pid": os.getpid(), "state": "running", "max_new_tokens": int(request["max_new_tokens"])}
        held = self._open_chat(session_id, request, meta)
        self._chats[session_id] = held
        try:
            write_json(private_dir(self.chats_root / session_id) / "chat.json", meta)
        except BaseException:
            self._chats.pop(session_id)["close"]()
            raise
        return {k: meta[k] for k in ("job_id", "created_at", "deadline_at")} | {"attached": False}

    def _open_chat(self, session_id: str, request: Mapping[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
        """Start what answers the session's turns; {"close": callable, ...} (local: evaluator:chat)."""
        from stateset_agents.core.runtimes import load_component

        model = load_component("evaluator:chat", runtime="subprocess")
        meta["adapter"] = str(Path(request["adapter"]["dir"]) / "adapter")
        return {"model": model, "close": model.close}

    def _held_chat(self, request: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(what this process holds, chat.json) for a turn; refused once the session ended or is past its deadline."""
        session_id = request["session_id"]
        held = self._chats.get(session_id)
        if held is None or not self._is_chat(session_id):
            raise StatesetError(f"chat session {session_id} is not open in this process")
        meta = load_json(self.chats_root / session_id / "chat.json")
        if time.time() >= float(meta["deadline_at"]):
            raise StatesetError(f"chat session {session_id} is past its deadline")
        if int(request.get("max_new_tokens") or meta["max_new_tokens"]) > int(meta["max_new_tokens"]):
            raise InputError(f"max_new_tokens above the {meta['max_new_tokens']} the session was quoted for",
                             field="max_new_tokens")
        return held, meta

    def chat_turn(self, request):
        held, meta = self._held_chat(request)
        turn = {k: v for k, v in request.items() if k != "session_id"}
        last: dict[str, Any] = {}
        for event in held["model"].run({**turn, "adapter": meta["adapter"]}):
            last = event
        return last or {"type": "failed", "reason": "error", "message": "evaluator:chat ended without a reply"}

    def _chat_spend(self, session_id: str, meta: Mapping[str, Any]) -> float:
        return 0.0  # local compute is not billed

    def _chat_status(self, session_id: str) -> dict[str, Any]:
        meta = load_json(self.chats_root / session_id / "chat.json")
        held = session_id in self._chats
        state = meta.get("state", "running")
        if state == "running" and not held and (int(meta["pid"]) == os.getpid() or not _alive(int(meta["pid"]))):
            state = "terminated"  # what held it died, and the session with it
        end = meta.get("finished_at") or time.time()
        return {"run_id": session_id, "job_id": meta["job_id"], "state": state, "ready": held and state == "running",
                "uptime_s": max(0.0, end - float(meta["created_at"])), "cost_per_hour": 0.0,
                "spend_usd": round(self._chat_spend(session_id, meta), 6), "deadline_at": meta["deadline_at"],
                "message": meta.get("message")}

    def _chat_terminate(self, session_id: str) -> dict[str, Any]:
        path = self.chats_root / session_id / "chat.json"
        meta = load_json(path)
        held = self._chats.pop(session_id, None)
        if held is None:
            if meta.get("state") == "running" and int(meta["pid"]) != os.getpid() and _alive(int(meta["pid"])):
                return {"run_id": session_id, "terminated": False,
                        "message": f"held by process {meta['pid']}; it ends with that process"}
            return {"run_id": session_id, "terminated": False}
        try:
            held["close"]()
        finally:
            write_json(path, {**load_json(path), "state": "terminated", "finished_at": time.time()})
        return {"run_id": session_id, "terminated": True, "job_id": meta["job_id"]}
