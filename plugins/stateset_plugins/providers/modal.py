"""`provider:modal`: a GPU function in a per-run app whose `timeout` is the remote-side deadline, a volume for the
artifacts, and a Dict that maps run ids to calls (the cross-machine claim that makes launch idempotent).

Modal publishes per-second rates but has no pricing API, so the quote comes from the dated table below (GPU plus a
CPU/memory allowance per hour); the watchdog takes the higher of uptime x rate and Modal's billing report.
Credentials: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or a ~/.modal.toml from `modal token new`); a quote needs none.
Run control: `stop` marks the run's Dict entry, which the container relays to the worker as its stop file
(`modal_sdk.relay`); `logs` and the worker's status.json (checkpoints, quarantine, a stop honoured) come from the
run's volume, which the container commits as it goes.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

from stateset_agents import Provider
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.plugin_api import jobs
from stateset_agents.plugin_api.chat_host import MODEL_DIR
from stateset_agents.plugin_api.gpus import resolve_gpu

from . import VERSION, common, modal_sdk

RATES_AS_OF = "2025-06-01"
#: USD per GPU-hour from Modal's pricing page on RATES_AS_OF
GPU_RATES = {"T4": 0.59, "L4": 0.80, "A10G": 1.10, "L40S": 1.95, "A100-40GB": 2.10, "A100-80GB": 2.50,
             "H100": 3.95, "H200": 4.54, "B200": 6.25}
CPU_MEMORY_ALLOWANCE = 0.40  # USD per job-hour: a few cores and 32 GiB at that date's rates, rounded up
ALIASES = {"a100": "A100-80GB", "h100-sxm": "H100", "a10": "A10G"}


CHAT_IDLE_S = 60  # a chat container scales down this long after its last turn
CHAT_DIR = f"chat/{MODEL_DIR}"  # on the run's volume: the adapter, manifest.json and files.json


def _names(run_id: str) -> dict[str, str]:
    base = common.resource_name(run_id)
    return {"app": base, "volume": base}


class ModalProvider(Provider):
    name = "modal"
    version = VERSION

    def _credentials(self) -> None:
        if (Path.home() / ".modal.toml").exists():
            return
        common.require_env("MODAL_TOKEN_ID", how="run `modal token new`, or export MODAL_TOKEN_ID and "
                                                  "MODAL_TOKEN_SECRET")
        common.require_env("MODAL_TOKEN_SECRET", how="export MODAL_TOKEN_SECRET with MODAL_TOKEN_ID")

    def quote(self, plan):
        offered = [{"id": k, "name": k} for k in GPU_RATES]
        if not plan.get("gpu"):
            raise InputError(f"--gpu is required for modal; choose one of: {', '.join(GPU_RATES)}", field="gpu")
        gpu = resolve_gpu(plan["gpu"], offered, ALIASES, provider="modal")
        count = int(plan.get("gpus") or 1)
        per_gpu = GPU_RATES[gpu] + CPU_MEMORY_ALLOWANCE / count
        return common.quote("modal", gpu, per_gpu, image=common.image_of(plan.get("image")),
                            source=f"modal rate table as of {RATES_AS_OF} (GPU ${GPU_RATES[gpu]}/h + CPU/memory "
                                   f"allowance ${CPU_MEMORY_ALLOWANCE}/h)")

    def launch(self, plan):
        self._credentials()
        image = common.pinned_image(plan["image"])
        run_id, names = plan["run_id"], _names(plan["run_id"])
        created = time.time()
        deadline = common.deadline_for(plan, created)
        claimed, existing = modal_sdk.claim(run_id, {"state": "creating", "created_at": created,
                                                     "deadline_at": deadline})
        if not claimed:
            return {"job_id": (existing or {}).get("call_id"), "created_at": (existing or {}).get("created_at"),
                    "deadline_at": (existing or {}).get("deadline_at"), "attached": True}
        env = {jobs.RUN_ID_ENV: run_id, jobs.DEADLINE_ENV: f"{deadline:.0f}", jobs.PROVIDER_ENV: "modal",
               "STATESET_VOLUME": names["volume"]}
        gpu = plan["gpu"]["id"] + (f":{plan['gpu']['count']}" if int(plan["gpu"]["count"]) > 1 else "")
        call_id = modal_sdk.spawn(run_id, app_name=names["app"], image_ref=image, gpu=gpu,
                                  timeout_s=int(float(plan["max_hours"]) * 3600), volume=names["volume"], env=env,
                                  bundle_b64=plan["bundle"]["b64"], bundle_sha256=plan["bundle"]["sha256"])
        rate = float(plan["quote"]["usd_per_gpu_hour"]) * int(plan["gpu"]["count"])
        modal_sdk.record(run_id, {"state": "spawned", "call_id": call_id, "created_at": created,
                                  "deadline_at": deadline, "rate": rate})
        return {"job_id": call_id, "created_at": created, "deadline_at": deadline, "attached": False}

    def status(self, run_id):
        self._credentials()
        entry = modal_sdk.lookup(run_id)
        if entry and entry.get("kind") == "chat":
            return self._chat_status(run_id, entry)
        if not entry or not entry.get("call_id"):
            state = "pending" if entry else "missing"
            return {"run_id": run_id, "state": state, "uptime_s": 0, "cost_per_hour": 0.0}
        state, message = modal_sdk.call_state(entry["call_id"])
        worker = self._worker_status(run_id)
        if entry.get("state") == "terminated":
            state = "terminated"
        elif state in ("succeeded", "failed") and worker.get("state") == "stopped":
            state, message = "stopped", worker.get("message")  # the worker honoured a stop: a checkpoint to collect
        end = entry.get("finished_at") or time.time()
        status = {"run_id": run_id, "job_id": entry["call_id"], "state": state, "message": message,
                  "uptime_s": max(0.0, end - float(entry["created_at"])), "cost_per_hour": entry.get("rate", 0.0),
                  "step": worker.get("step"), "total": worker.get("total"), **common.reported(worker)}
        if entry.get("stop_requested"):
            status["stop_requested"] = True
        try:
            reported = modal_sdk.reported_cost(run_id, float(entry["created_at"]))
        except Exception:  # noqa: BLE001 - the report is a second opinion; uptime x rate always applies
            reported = None
        if reported is not None:
            status["spend_usd"] = reported
        return status

    def _read(self, run_id: str, path: str) -> bytes | None:
        """A file of the run's volume; None while it is not there (not written, or not committed yet)."""
        try:
            return modal_sdk.read_file(_names(run_id)["volume"], path)
        except Exception as exc:  # noqa: BLE001 - only "not there" means None; anything else is an error
            if isinstance(exc, FileNotFoundError) or type(exc).__name__ == "NotFoundError":
                return None
            raise

    def _worker_status(self, run_id: str) -> dict:
        data = self._read(run_id, "job/status.json")
        return json.loads(data) if data else {}

    def stop(self, run_id):
        """Cooperative: "stop_requested" in the run's Dict entry; the container writes the worker's stop file."""
        self._credentials()
        entry = modal_sdk.lookup(run_id)
        if not entry or entry.get("kind") == "chat" or not entry.get("call_id"):
            return {"run_id": run_id, "requested": False, "message": "no such job" if not entry else
                    "nothing to stop cooperatively (terminate it)"}
        state = self.status(run_id)["state"]
        if state not in ("pending", "running"):
            return {"run_id": run_id, "requested": False, "message": f"the job is already {state}"}
        modal_sdk.record(run_id, {**entry, "stop_requested": True, "stop_requested_at": time.time()})
        return {"run_id": run_id, "requested": True,
                "message": f"the container relays it within {modal_sdk.RELAY_S:g}s; the worker saves a full "
                           "checkpoint after the current update and ends (state stopped)"}

    def logs(self, request):
        self._credentials()
        return common.log_slice(self._read(request["run_id"], f"job/{common.EVENTS_FILE}"), request)

    def terminate(self, run_id):
        self._credentials()
        entry = modal_sdk.lookup(run_id)
        if entry and entry.get("kind") == "chat" and entry.get("state") != "terminated":
            modal_sdk.stop_app(_names(run_id)["app"])
            modal_sdk.record(run_id, {**entry, "state": "terminated", "finished_at": time.time()})
            return {"run_id": run_id, "terminated": True}
        if not entry or not entry.get("call_id") or entry.get("state") == "terminated":
            return {"run_id": run_id, "terminated": False}
        modal_sdk.cancel(entry["call_id"], _names(run_id)["app"])
        modal_sdk.record(run_id, {**entry, "state": "terminated", "finished_at": time.time()})
        return {"run_id": run_id, "terminated": True}

    def list_jobs(self):
        self._credentials()
        found = []
        for run_id, entry in modal_sdk.all_runs():
            if entry.get("kind") == "chat" and entry.get("state") != "terminated":
                found.append(self._chat_status(run_id, entry))
                continue
            if entry.get("state") == "terminated" or not entry.get("call_id"):
                continue
            state, _ = modal_sdk.call_state(entry["call_id"])
            found.append({"run_id": run_id, "job_id": entry["call_id"], "state": state,
                          "uptime_s": time.time() - float(entry["created_at"]), "cost_per_hour": entry.get("rate", 0),
                          "deadline_at": entry.get("deadline_at")})
        return found

    def artifacts(self, request):
        self._credentials()
        try:
            return json.loads(modal_sdk.read_file(_names(request["run_id"])["volume"], "job/receipt.json"))
        except Exception:  # noqa: BLE001 - no receipt (yet)
            return {"run_id": request["run_id"], "state": "missing", "files": []}

    def read_artifact(self, request):
        import base64

        rel = jobs.safe_relpath(str(request["path"]))
        data = modal_sdk.read_file(_names(request["run_id"])["volume"], f"job/run/{rel}")
        offset, length = int(request.get("offset") or 0), int(request.get("length") or (1 << 20))
        part = data[offset:offset + length]
        return {"data_b64": base64.b64encode(part).decode(), "eof": offset + len(part) >= len(data)}

    # ------------------------------------------------------------------------------------------------------ chat
    def chat_open(self, request):
        """Upload the adapter to the run's volume, then deploy the chat function (claimed first, like a job)."""
        self._credentials()
        session_id, quote = request["session_id"], request["quote"]
        created = time.time()
        entry = {"kind": "chat", "state": "creating", "created_at": created,
                 "deadline_at": created + float(request["max_minutes"]) * 60.0,
                 "rate": float(quote["usd_per_gpu_hour"]), "run_id": request["run_id"]}
        claimed, existing = modal_sdk.claim(session_id, entry)
        if not claimed and (existing or {}).get("state") != "terminated":
            return {"job_id": _names(session_id)["app"], "created_at": existing["created_at"],
                    "deadline_at": existing["deadline_at"], "attached": True}
        if not claimed:  # taking over a closed session's key (a claim already stored the entry)
            modal_sdk.record(session_id, entry)
        listing = request["adapter"]
        volume = _names(request["run_id"])["volume"]
        modal_sdk.upload_files(volume, listing["dir"], listing["files"], CHAT_DIR,
                               json.dumps({"sha256": listing["sha256"], "files": listing["files"]}).encode())
        env = {jobs.RUN_ID_ENV: session_id, jobs.DEADLINE_ENV: f"{entry['deadline_at']:.0f}",
               jobs.PROVIDER_ENV: "modal"}
        modal_sdk.deploy_chat(session_id, run_id=request["run_id"], app_name=_names(session_id)["app"],
                              image_ref=quote["image"]["ref"], gpu=quote["gpu"],
                              timeout_s=max(60, int(float(request["max_minutes"]) * 60)), idle_s=CHAT_IDLE_S,
                              volume=volume, env=env)
        modal_sdk.record(session_id, {**entry, "state": "deployed"})
        return {"job_id": _names(session_id)["app"], "created_at": created, "deadline_at": entry["deadline_at"],
                "attached": False}

    def _chat_status(self, session_id, entry):
        state = {"deployed": "running", "creating": "pending"}.get(entry.get("state"), "terminated")
        end = entry.get("finished_at") or time.time()
        return {"run_id": session_id, "job_id": _names(session_id)["app"], "state": state,
                "ready": state == "running", "uptime_s": max(0.0, end - float(entry["created_at"])),
                "cost_per_hour": entry.get("rate", 0.0), "deadline_at": entry.get("deadline_at")}

    def chat_turn(self, request):
        self._credentials()
        session_id = request["session_id"]
        entry = modal_sdk.lookup(session_id)
        if not entry or entry.get("kind") != "chat" or entry.get("state") != "deployed":
            raise StatesetError(f"chat session {session_id} is not open on modal")
        if time.time() >= float(entry["deadline_at"]):
            raise StatesetError(f"chat session {session_id} is past its deadline")
        return modal_sdk.chat_call(_names(session_id)["app"], {k: v for k, v in request.items()
                                                              if k != "session_id"})
