"""/training/jobs: training jobs submitted over the gateway, run in a worker process (`job_worker`), their state in
the database.

- ``{"kind": "train", ...}``: what `stateset-agents train` runs (the same trainer request: dataset, algorithm,
  reward, reward_config, base_model, steps, seed, save_every, config), on this machine.
- ``{"kind": "train-remote", "config": {...}}``: a `train-remote` plan; ``config.max_cost_usd`` is required. The
  plan is quoted and checked against the cap in the request (`remote.session.prepare`): the quote comes back in
  the answer and nothing is rented above the cap; the worker launches it and mirrors its events.

A job is claimed before its worker starts (one conditional UPDATE: queued -> starting, with a token the worker
must present to take it: starting -> running), so it never runs twice, however many gateways share the database.
On start, a gateway reattaches: running jobs whose worker lives are followed again, queued ones are started, and a
running job whose worker is gone is failed, saying so.
"""
from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from ..core.errors import InputError, StatesetError
from .db import Database, encode, where
from .errors import ApiError, bad, field
from .job_worker import FINAL, process_start
from .paths import Confined

LIVE = ("queued", "starting", "running")
STATES = (*LIVE, *FINAL)
START_GRACE_S = 60.0
TRAIN_FIELDS = {"dataset": "string", "algorithm": "string", "reward": "string", "reward_config": "object",
                "base_model": "string", "eval_prompts": "string", "steps": "integer", "seed": "integer",
                "save_every": "integer", "config": "object"}
JOB_SCHEMA = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "type": "object", "required": ["kind"], "properties": {
        "kind": {"type": "string", "enum": ["train", "train-remote"]},
        **{k: {"type": v} for k, v in TRAIN_FIELDS.items()}, "config": {"type": "object"}}}}}}}


def public(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "object": "training.job", "owner": row["owner"], "kind": row["kind"],
            "state": row["state"], "metrics": row["metrics"] or {}, "message": row["message"],
            "run_id": row["run_id"], "quote": row["quote"], "stop_requested": bool(row["stop_requested"]),
            "attempts": row["attempts"], "output": str(Path(row["job_dir"]) / "run"),
            "created_at": row["created_at"], "updated_at": row["updated_at"]}


def alive(row: dict[str, Any]) -> bool:
    return bool(row.get("pid")) and process_start(int(row["pid"])) == row.get("pid_start")


class Jobs:
    def __init__(self, db: Database, root: str | os.PathLike, confined: Confined | None = None):
        self.db, self.root = db, Path(root)
        self.confined = confined or Confined()
        self.root.mkdir(parents=True, exist_ok=True)
        self._children: list[subprocess.Popen] = []
        self._stop = threading.Event()
        self.reattached: list[str] = []
        self.reattach()
        self._monitor = threading.Thread(target=self._watch, name="jobs", daemon=True)
        self._monitor.start()

    # submission ---------------------------------------------------------------------------------------------
    def _train_request(self, body: dict[str, Any], job_dir: Path) -> dict[str, Any]:
        from ..pipeline.training import resolve_trainer, train_request

        unknown = set(body) - set(TRAIN_FIELDS) - {"kind"}
        if unknown:
            raise bad(f"unknown field {sorted(unknown)[0]!r} for a train job", sorted(unknown)[0])
        values = {k: field(body, k, kind) for k, kind in TRAIN_FIELDS.items()}
        field(body, "dataset", "string", required=True)
        # every file a client names lies inside the server's roots (no '../', absolute path or symlink out)
        values["dataset"] = self.confined.path(values["dataset"], "dataset")
        if values["eval_prompts"] is not None:
            values["eval_prompts"] = self.confined.path(values["eval_prompts"], "eval_prompts")
        values["base_model"] = self.confined.maybe_path(values["base_model"], "base_model")
        self.confined.scan(values["reward_config"], "reward_config")
        self.confined.scan(values["config"], "config")
        try:
            spec = resolve_trainer(values["algorithm"])
        except StatesetError as exc:  # an unknown trainer, or one that does not run here
            raise bad(str(exc), "algorithm") from None
        reward = values["reward"]
        if reward and not reward.startswith("reward:"):
            reward = f"reward:{reward}"
        # the request `stateset-agents train` builds (pipeline.training), with the job's own run directory
        return {"algorithm": spec.name, **train_request(
            dataset=values["dataset"], output=job_dir / "run", reward=reward, reward_config=values["reward_config"],
            base_model=values["base_model"], eval_prompts=values["eval_prompts"], steps=values["steps"],
            seed=values["seed"], save_every=values["save_every"], config=values["config"])}

    def _remote_plan(self, body: dict[str, Any], job_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        from ..remote import session

        config = field(body, "config", "object", required=True)
        self.confined.scan(config, "config")
        if "max_cost_usd" not in config:
            raise bad("a train-remote job needs a cap: config.max_cost_usd (USD)", "config.max_cost_usd")
        name = config.get("provider")
        if not isinstance(name, str) or not name:
            raise bad("'config.provider' names the provider", "config.provider")
        try:
            with session.open_provider(name, config.get("provider_config")) as provider:
                plan = session.prepare(config, job_dir / "workspace", provider)
        except (InputError, StatesetError) as exc:  # above the cap, a bad config: nothing was rented
            raise bad(f"the plan was refused: {exc}", getattr(exc, "field", None)) from None
        return ({"provider": name, "provider_config": config.get("provider_config")},
                {k: plan.get(k) for k in ("run_id", "quote", "worst_case_usd") if k in plan})

    def submit(self, owner: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad("the body must be a JSON object")
        kind = field(body, "kind", "string", required=True)
        if kind not in ("train", "train-remote"):
            raise bad(f"'kind' must be 'train' or 'train-remote', got {kind!r}", "kind")
        job_id = f"job_{secrets.token_hex(8)}"
        job_dir = self.root / job_id
        quote = None
        if kind == "train":
            request = {"train": self._train_request(body, job_dir)}
        else:
            request, quote = self._remote_plan(body, job_dir)
        job_dir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        self.db.execute("INSERT INTO jobs (id, owner, kind, state, request, job_dir, run_id, quote, created_at, "
                        "updated_at) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?)",
                        (job_id, owner, kind, encode(request), str(job_dir), (quote or {}).get("run_id"),
                         encode(quote), now, now))
        self.dispatch(job_id)
        return self.get(job_id)

    def dispatch(self, job_id: str) -> bool:
        """Claim a queued job and start its worker; False when another gateway (or an earlier call) has it."""
        token = secrets.token_hex(8)
        if self.db.execute("UPDATE jobs SET state = 'starting', claimed_by = ?, updated_at = ? "
                           "WHERE id = ? AND state = 'queued'", (token, time.time(), job_id)) != 1:
            return False
        job_dir = self.root / job_id
        job_dir.mkdir(parents=True, exist_ok=True)
        with open(job_dir / "worker.log", "ab") as log:
            child = subprocess.Popen([sys.executable, "-m", "stateset_agents.gateway.job_worker", "--database",
                                      self.db.url, "--job", job_id, "--token", token], stdout=log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._children.append(child)
        return True

    # restart and monitoring ---------------------------------------------------------------------------------
    def reattach(self) -> None:
        now = time.time()
        for row in self.db.query("SELECT * FROM jobs WHERE state IN ('queued', 'starting', 'running')"):
            if row["state"] == "queued":
                self.dispatch(row["id"])
            elif alive(row):
                self.reattached.append(row["id"])
            elif row["state"] == "starting" and now - row["updated_at"] > START_GRACE_S:
                # claimed by a gateway that died before its worker took it: queue it again (a conditional update,
                # so a worker that took it meanwhile keeps it)
                if self.db.execute("UPDATE jobs SET state = 'queued', claimed_by = NULL WHERE id = ? AND "
                                   "state = 'starting' AND claimed_by = ?", (row["id"], row["claimed_by"])) == 1:
                    self.dispatch(row["id"])
        self._fail_orphans()

    def _fail_orphans(self) -> None:
        for row in self.db.query("SELECT * FROM jobs WHERE state = 'running'"):
            if not alive(row):
                self.db.execute("UPDATE jobs SET state = 'failed', message = ?, updated_at = ? WHERE id = ? AND "
                                "state = 'running' AND pid = ?",
                                ("the worker process ended without recording a final state (see worker.log)",
                                 time.time(), row["id"], row["pid"]))

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            self._children = [c for c in self._children if c.poll() is None]  # reap the ended workers
            try:
                self._fail_orphans()
            except Exception:  # a database hiccup: the next round tries again
                pass

    def close(self) -> None:
        self._stop.set()

    # queries and control ------------------------------------------------------------------------------------
    def get(self, job_id: str) -> dict[str, Any]:
        row = self.db.one("SELECT * FROM jobs WHERE id = ?", (job_id,))
        if row is None:
            raise KeyError(job_id)
        return row

    def visible(self, key, job_id: str) -> dict[str, Any]:
        try:
            row = self.get(job_id)
        except KeyError:
            row = None
        if row is None or (not key.admin and row["owner"] != key.owner):
            raise ApiError("route_not_found", f"no training job {job_id!r} for this key")
        return row

    def stop(self, row: dict[str, Any]) -> dict[str, Any]:
        from ..plugin_api.jobs import STOP_FILE

        if row["state"] in FINAL:
            raise ApiError("conflict", f"job {row['id']} is already {row['state']}: nothing to stop")
        self.db.execute("UPDATE jobs SET stop_requested = 1, updated_at = ? WHERE id = ?", (time.time(), row["id"]))
        if row["kind"] == "train-remote" and row["run_id"]:
            from .. import runs

            answer = runs.stop(row["run_id"])
            return {"id": row["id"], "requested": answer["requested"], "message": answer.get("message")}
        (Path(row["job_dir"]) / STOP_FILE).write_text("stop requested over the gateway\n")
        if row["state"] == "queued":
            self.db.execute("UPDATE jobs SET state = 'stopped', message = 'stopped before it started' "
                            "WHERE id = ? AND state = 'queued'", (row["id"],))
        return {"id": row["id"], "requested": True,
                "message": "the trainer saves a checkpoint after its current update and ends (state stopped)"}

    def cancel(self, row: dict[str, Any]) -> dict[str, Any]:
        if row["state"] in FINAL:
            raise ApiError("conflict", f"job {row['id']} is already {row['state']}: nothing to cancel")
        if row["kind"] == "train-remote" and row["run_id"]:
            from .. import runs

            runs.cancel(row["run_id"])
        elif row["pid"] and alive(row):
            try:
                os.killpg(int(row["pid"]), signal.SIGKILL)  # the worker leads its own session
            except ProcessLookupError:
                pass
        self.db.execute("UPDATE jobs SET state = 'cancelled', message = 'cancelled over the gateway', "
                        "updated_at = ? WHERE id = ? AND state IN ('queued', 'starting', 'running')",
                        (time.time(), row["id"]))
        return public(self.get(row["id"]))

    def counts(self) -> dict[str, int]:
        rows = self.db.query("SELECT state, COUNT(*) AS n FROM jobs GROUP BY state")
        return {state: 0 for state in STATES} | {r["state"]: int(r["n"]) for r in rows}


def _status(row: dict[str, Any]) -> dict[str, Any]:
    body = public(row)
    run = Path(row["job_dir"]) / "run"
    if (run / "checkpoints").is_dir():
        from ..plugin_api.checkpoints import checkpoint_table

        body["checkpoints"] = checkpoint_table(run)
    else:
        body["checkpoints"] = []
    if row["kind"] == "train-remote" and row["run_id"] and row["state"] == "running":
        from .. import runs

        try:  # the provider's view of a live remote run (state, spend, its checkpoints)
            live = runs.status(row["run_id"])
            body["remote"] = {"phase": live["phase"], "job": live["job"], "stop_requested": live["stop_requested"]}
            body["checkpoints"] = live["checkpoints"] or body["checkpoints"]
        except (InputError, StatesetError) as exc:
            body["remote"] = {"error": str(exc)}
    return body


def register(app: FastAPI, jobs: Jobs, authorize: Callable, json_body: Callable) -> None:
    @app.post("/training/jobs", status_code=201, openapi_extra=JOB_SCHEMA)
    async def submit_job(request: Request):
        key = authorize(request, scope="train")
        body = await json_body(request)
        return public(await asyncio.to_thread(jobs.submit, key.owner, body))

    @app.get("/training/jobs")
    async def list_jobs(request: Request, state: str | None = None, owner: str | None = None):
        key = authorize(request, scope="train")
        if owner is not None and not key.admin and owner != key.owner:
            raise ApiError("permission", "a key sees only its own owner's jobs")
        if state is not None and state not in STATES:
            raise ApiError("invalid_request", f"'state' must be one of {', '.join(STATES)}", param="state")
        clause, params = where([("owner = ?", owner if owner is not None else (None if key.admin else key.owner)),
                                ("state = ?", state)])
        rows = jobs.db.query(f"SELECT * FROM jobs{clause} ORDER BY created_at DESC", params)
        return {"object": "list", "data": [public(r) for r in rows]}

    @app.get("/training/jobs/{job_id}")
    async def job_status(request: Request, job_id: str):
        return await asyncio.to_thread(_status, jobs.visible(authorize(request, scope="train"), job_id))

    @app.post("/training/jobs/{job_id}/stop")
    async def stop_job(request: Request, job_id: str):
        row = jobs.visible(authorize(request, scope="train"), job_id)
        return await asyncio.to_thread(jobs.stop, row)

    @app.post("/training/jobs/{job_id}/cancel")
    async def cancel_job(request: Request, job_id: str):
        row = jobs.visible(authorize(request, scope="train"), job_id)
        return await asyncio.to_thread(jobs.cancel, row)

    @app.get("/training/jobs/{job_id}/events")
    async def job_events(request: Request, job_id: str, offset: int = 0):
        key = authorize(request, scope="train")
        jobs.visible(key, job_id)
        if offset < 0:
            raise ApiError("invalid_request", "'offset' must be >= 0", param="offset")

        async def stream() -> AsyncIterator[bytes]:
            position, carry = offset, b""
            path = Path(jobs.get(job_id)["job_dir"]) / "events.jsonl"
            while True:
                state = (await asyncio.to_thread(jobs.get, job_id))["state"]
                data = b""
                if path.is_file():
                    with open(path, "rb") as f:
                        f.seek(position)
                        data = f.read(1 << 20)
                start = position - len(carry)  # where `carry + data` begins in the file
                position += len(data)
                lines = (carry + data).split(b"\n")
                carry = lines[-1]
                for raw in lines[:-1]:
                    start += len(raw) + 1  # the id is the offset after this line: resume with ?offset=ID
                    if raw.strip():
                        try:
                            kind = str(orjson.loads(raw).get("type", "event"))
                        except (orjson.JSONDecodeError, AttributeError):
                            kind = "log"
                        yield b"event: %s\nid: %d\ndata: %s\n\n" % (kind.encode(), start, raw)
                if state in FINAL and not data:
                    row = await asyncio.to_thread(jobs.get, job_id)
                    yield b"event: end\ndata: %s\n\n" % orjson.dumps({"state": row["state"],
                                                                       "message": row["message"]})
                    return
                if not data:
                    await asyncio.sleep(0.25)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", "x-accel-buffering": "no"})
