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


class _Guarded:
    """modal_sdk's functions (looked up at each call, so a test's fake of them applies), their failures (Modal
    unreachable, a timeout, a cut reply) StatesetErrors naming the call, never the SDK's exceptions."""

    def __getattr__(self, name: str):
        fn = getattr(modal_sdk, name)

        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (StatesetError, FileNotFoundError, KeyError):
                raise  # ours, and the answers read_file and chat_call give on purpose
            except Exception as exc:  # noqa: BLE001 - modal's, grpclib's and the network's errors alike
                if type(exc).__name__ == "NotFoundError":
                    raise  # an answer ("not there"), which callers read as such
                raise StatesetError(f"modal API {name} failed: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0][:300] if str(exc) else ''}") from None
        return call


_api = _Guarded()


def _quietly(fn, *args) -> None:
    try:
        fn(*args)
    except StatesetError:
        pass  # best effort on a path that is failing already: the entry left says what may be running


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
        rate = float(plan["quote"]["usd_per_gpu_hour"]) * int(plan["gpu"]["count"])
        entry = {"state": "creating", "created_at": created, "deadline_at": deadline, "rate": rate}
        claimed, existing = _api.claim(run_id, entry)
        if not claimed:
            if (existing or {}).get("call_id"):
                return {"job_id": existing["call_id"], "created_at": existing.get("created_at"),
                        "deadline_at": existing.get("deadline_at"), "attached": True}
            # An earlier launch ended before it recorded a call id (its answer lost, or it died): whatever it
            # spawned is stopped with its app before this launch spawns, so two never run at once.
            _api.stop_app(names["app"])
            _api.record(run_id, entry)
        env = {jobs.RUN_ID_ENV: run_id, jobs.DEADLINE_ENV: f"{deadline:.0f}", jobs.PROVIDER_ENV: "modal",
               "STATESET_VOLUME": names["volume"]}
        gpu = plan["gpu"]["id"] + (f":{plan['gpu']['count']}" if int(plan["gpu"]["count"]) > 1 else "")
        try:
            call_id = _api.spawn(run_id, app_name=names["app"], image_ref=image, gpu=gpu,
                                 timeout_s=int(float(plan["max_hours"]) * 3600), volume=names["volume"], env=env,
                                 bundle_b64=plan["bundle"]["b64"], bundle_sha256=plan["bundle"]["sha256"])
        except StatesetError:
            _quietly(_api.stop_app, names["app"])  # the spawn may have happened: nothing runs that no entry names
            _quietly(_api.record, run_id, {**entry, "state": "abandoned"})
            raise
        try:
            _api.record(run_id, {**entry, "state": "spawned", "call_id": call_id})
        except StatesetError:
            _quietly(_api.cancel, call_id, names["app"])  # a call no entry names would run unwatched
            _quietly(_api.record, run_id, {**entry, "state": "abandoned"})
            raise
        return {"job_id": call_id, "created_at": created, "deadline_at": deadline, "attached": False}

    def status(self, run_id):
        self._credentials()
        entry = _api.lookup(run_id)
        if entry and entry.get("kind") == "chat":
            return self._chat_status(run_id, entry)
        if not entry or not entry.get("call_id"):
            # no call recorded: none to follow (a launch that lost its call's id left it stopped, or stops it when
            # launched again), so a retry launches rather than attaching to nothing
            return {"run_id": run_id, "state": "missing", "uptime_s": 0, "cost_per_hour": 0.0}
        state, message = _api.call_state(entry["call_id"])
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
            reported = _api.reported_cost(run_id, float(entry["created_at"]))
        except Exception:  # noqa: BLE001 - the report is a second opinion; uptime x rate always applies
            reported = None
        if reported is not None:
            status["spend_usd"] = reported
        return status

    def _read(self, run_id: str, path: str) -> bytes | None:
        """A file of the run's volume; None while it is not there (not written, or not committed yet)."""
        try:
            return _api.read_file(_names(run_id)["volume"], path)
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
        entry = _api.lookup(run_id)
        if not entry or entry.get("kind") == "chat" or not entry.get("call_id"):
            return {"run_id": run_id, "requested": False, "message": "no such job" if not entry else
                    "nothing to stop cooperatively (terminate it)"}
        state = self.status(run_id)["state"]
        if state not in ("pending", "running"):
            return {"run_id": run_id, "requested": False, "message": f"the job is already {state}"}
        _api.record(run_id, {**entry, "stop_requested": True, "stop_requested_at": time.time()})
        return {"run_id": run_id, "requested": True,
                "message": f"the container relays it within {modal_sdk.RELAY_S:g}s; the worker saves a full "
                           "checkpoint after the current update and ends (state stopped)"}

    def logs(self, request):
        self._credentials()
        return common.log_slice(self._read(request["run_id"], f"job/{common.EVENTS_FILE}"), request)

    def terminate(self, run_id):
        self._credentials()
        entry = _api.lookup(run_id)
        if entry and entry.get("kind") == "chat" and entry.get("state") != "terminated":
            _api.stop_app(_names(run_id)["app"])
            _api.record(run_id, {**entry, "state": "terminated", "finished_at": time.time()})
            return {"run_id": run_id, "terminated": True}
        if entry and entry.get("state") == "creating" and not entry.get("call_id"):
            _api.stop_app(_names(run_id)["app"])  # a launch that never recorded its call: stop what it spawned
            _api.record(run_id, {**entry, "state": "terminated", "finished_at": time.time()})
            return {"run_id": run_id, "terminated": True}
        if not entry or not entry.get("call_id") or entry.get("state") == "terminated":
            return {"run_id": run_id, "terminated": False}
        _api.cancel(entry["call_id"], _names(run_id)["app"])
        _api.record(run_id, {**entry, "state": "terminated", "finished_at": time.time()})
        return {"run_id": run_id, "terminated": True}

    def list_jobs(self):
        self._credentials()
        found = []
        for run_id, entry in _api.all_runs():
            if entry.get("kind") == "chat" and entry.get("state") != "terminated":
                found.append(self._chat_status(run_id, entry))
                continue
            if entry.get("state") == "creating" and not entry.get("call_id"):
                # a launch that never recorded its call: it may have spawned one, findable only by its app
                found.append({"run_id": run_id, "job_id": _names(run_id)["app"], "state": "pending",
                              "uptime_s": time.time() - float(entry["created_at"]),
                              "cost_per_hour": entry.get("rate", 0), "deadline_at": entry.get("deadline_at")})
                continue
            if entry.get("state") == "terminated" or not entry.get("call_id"):
                continue
            state, _ = _api.call_state(entry["call_id"])
            found.append({"run_id": run_id, "job_id": entry["call_id"], "state": state,
                          "uptime_s": time.time() - float(entry["created_at"]), "cost_per_hour": entry.get("rate", 0),
                          "deadline_at": entry.get("deadline_at")})
        return found

    def artifacts(self, request):
        self._credentials()
        try:
            return json.loads(_api.read_file(_names(request["run_id"])["volume"], "job/receipt.json"))
        except Exception:  # noqa: BLE001 - no receipt (yet)
            return {"run_id": request["run_id"], "state": "missing", "files": []}

    def read_artifact(self, request):
        import base64

        rel = jobs.safe_relpath(str(request["path"]))
        data = _api.read_file(_names(request["run_id"])["volume"], f"job/run/{rel}")
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
        claimed, existing = _api.claim(session_id, entry)
        if not claimed and (existing or {}).get("state") != "terminated":
            return {"job_id": _names(session_id)["app"], "created_at": existing["created_at"],
                    "deadline_at": existing["deadline_at"], "attached": True}
        if not claimed:  # taking over a closed session's key (a claim already stored the entry)
            _api.record(session_id, entry)
        listing = request["adapter"]
        volume = _names(request["run_id"])["volume"]
        _api.upload_files(volume, listing["dir"], listing["files"], CHAT_DIR,
                               json.dumps({"sha256": listing["sha256"], "files": listing["files"]}).encode())
        env = {jobs.RUN_ID_ENV: session_id, jobs.DEADLINE_ENV: f"{entry['deadline_at']:.0f}",
               jobs.PROVIDER_ENV: "modal"}
        _api.deploy_chat(session_id, run_id=request["run_id"], app_name=_names(session_id)["app"],
                              image_ref=quote["image"]["ref"], gpu=quote["gpu"],
                              timeout_s=max(60, int(float(request["max_minutes"]) * 60)), idle_s=CHAT_IDLE_S,
                              volume=volume, env=env)
        _api.record(session_id, {**entry, "state": "deployed"})
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
        entry = _api.lookup(session_id)
        if not entry or entry.get("kind") != "chat" or entry.get("state") != "deployed":
            raise StatesetError(f"chat session {session_id} is not open on modal")
        if time.time() >= float(entry["deadline_at"]):
            raise StatesetError(f"chat session {session_id} is past its deadline")
        return _api.chat_call(_names(session_id)["app"], {k: v for k, v in request.items()
                                                              if k != "session_id"})
