"""`provider:runpod`: a GPU pod running the trainer image, priced by RunPod's API, named and labelled by run id.

* Quote: `gpuTypes(id)` `securePrice` (or `communityPrice` with provider_config.cloud_type COMMUNITY) per GPU-hour,
  plus disk at the storage rate below. A GPU with no on-demand price there is refused, not guessed. Without --gpu
  the job gets DEFAULT_GPU, and the quote says so. Without RUNPOD_API_KEY (`--plan-only`) the price comes from the
  dated FALLBACK table below, marked "dated fallback, not a live price"; a launch needs the key and re-quotes live.
* Launch: look the pod named stateset-RUN_ID up first; create only when there is none. The pod's environment
  carries the run id, the deadline (the worker self-terminates the pod at it, with the pod's own RUNPOD_API_KEY),
  a per-run token and the workspace bundle (so a bundle must stay under BUNDLE_LIMIT).
* Artifacts: the worker serves /receipt and /files on port 8765 behind RunPod's HTTPS proxy, token-protected.
* Run control: `stop` is `POST /stop` there (the worker saves at the next safe boundary and ends, state stopped);
  `logs` is `GET /logs?offset=&length=` (the job's events.jsonl); `status` passes the worker's checkpoints,
  quarantine record and stop request through from its /status.
* Chat (`chat-remote`): a pod named stateset-RUN_ID-chat from the same image runs the chat worker
  (`python -m stateset_agents.remote.chat_worker pod`): the adapter is uploaded to it through the proxy in slices,
  checked against its sha256 and installed at once; each turn is one POST /chat. The pod terminates itself at its
  deadline, like a training pod.
"""
from __future__ import annotations

import base64
import json
import os
import secrets
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from stateset_agents import Provider
from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.plugin_api import jobs
from stateset_agents.plugin_api.gpus import resolve_gpu

from . import VERSION, common, runpod_sdk

KEY_ENV = "RUNPOD_API_KEY"
PROXY_ENV = "STATESET_RUNPOD_PROXY_URL"  # "{pod_id}" and "{port}" are filled in
PROXY_DEFAULT = "https://{pod_id}-{port}.proxy.runpod.net"
PORT = 8765
#: Without --gpu: 80 GB holds the LoRA jobs of docs/remote.md, at about half an H100's price.
DEFAULT_GPU = "NVIDIA A100 80GB PCIe"
#: The dated fallback for a quote without RUNPOD_API_KEY (`--plan-only`): on-demand USD per GPU-hour from RunPod's
#: pricing page as read on FALLBACK_AS_OF (transcribed in datareceipts/data-receipts 109-gpu-pricing/vendors.json).
#: Never used to launch: a launch needs the key and is re-quoted from the API.
FALLBACK_AS_OF = "2026-11-09"
FALLBACK_SOURCE = "https://www.runpod.io/pricing"
FALLBACK = {"SECURE": {"NVIDIA H100 80GB HBM3": 3.99, "NVIDIA H100 PCIe": 2.89, "NVIDIA H100 NVL": 3.19,
                       "NVIDIA A100 80GB PCIe": 1.79, "NVIDIA A100-SXM4-80GB": 1.79},
            "COMMUNITY": {"NVIDIA H100 80GB HBM3": 2.69, "NVIDIA H100 PCIe": 1.99, "NVIDIA H100 NVL": 2.59,
                          "NVIDIA A100 80GB PCIe": 1.19, "NVIDIA A100-SXM4-80GB": 1.39}}
STORAGE_AS_OF = "2025-06-01"
STORAGE_USD_PER_GB_MONTH = 0.10  # RunPod container/volume disk while running, from its pricing page on that date
BUNDLE_LIMIT = 512 * 1024
UPLOAD_SLICE = 4 << 20  # bytes per adapter upload request through the proxy
TURN_TIMEOUT_S = 600.0
ALIASES = {"h100": "NVIDIA H100 80GB HBM3", "h100-sxm": "NVIDIA H100 80GB HBM3", "h100-pcie": "NVIDIA H100 PCIe",
           "h200": "NVIDIA H200", "a100": "NVIDIA A100 80GB PCIe", "a100-80gb": "NVIDIA A100 80GB PCIe",
           "a100-sxm": "NVIDIA A100-SXM4-80GB", "l40s": "NVIDIA L40S", "a40": "NVIDIA A40",
           "4090": "NVIDIA GeForce RTX 4090", "rtx4090": "NVIDIA GeForce RTX 4090"}
_STATE = {"RUNNING": "running", "CREATED": "pending", "EXITED": "failed", "TERMINATED": "terminated"}


def _env_dict(pod: dict[str, Any]) -> dict[str, str]:
    raw = pod.get("env") or []
    if isinstance(raw, dict):
        return raw
    return dict(item.split("=", 1) for item in raw if "=" in item)


class RunPodProvider(Provider):
    name = "runpod"
    version = VERSION

    def __init__(self, config=None):
        super().__init__(config)
        self._listings: dict[str, dict[str, Any]] = {}  # chat session id -> the adapter files it serves

    def _key(self) -> str:
        return common.require_env(KEY_ENV, how="create an API key in the RunPod console (Settings > API Keys) and "
                                                "export RUNPOD_API_KEY")

    @property
    def cloud_type(self) -> str:
        return str(self.config.get("cloud_type", "SECURE")).upper()

    def quote(self, plan):
        gpu_asked = plan.get("gpu") or DEFAULT_GPU
        count = int(plan.get("gpus") or 1)
        storage = float(plan.get("storage_gb") or 0) * STORAGE_USD_PER_GB_MONTH * float(plan["max_hours"]) / 730.0
        shown = {"image": common.image_of(plan.get("image")), "cloud_type": self.cloud_type,
                 **({} if plan.get("gpu") else {"gpu_default": "runpod's default; --gpu chooses another"})}
        storage_note = f"storage ${STORAGE_USD_PER_GB_MONTH}/GB-month as of {STORAGE_AS_OF}"
        key = os.environ.get(KEY_ENV)
        if not key:  # the price needs RunPod's API: show the dated table's, marked as such, and rent nothing
            table = FALLBACK.get(self.cloud_type, {})
            offered = [{"id": g, "name": g} for g in table]
            gpu_id = resolve_gpu(gpu_asked, offered, ALIASES, provider="runpod (dated fallback table)")
            return common.quote("runpod", gpu_id, table[gpu_id], storage_usd=storage, live=False,
                                source=f"runpod dated fallback, not a live price: {self.cloud_type} on-demand from "
                                       f"{FALLBACK_SOURCE} as of {FALLBACK_AS_OF}; {storage_note}",
                                live_needs=f"{KEY_ENV} is not set, so this is not a live price; a launch needs it "
                                           "and re-quotes from RunPod's API (RunPod console: Settings > API Keys)",
                                **shown)
        offered = [{"id": g["id"], "name": g.get("displayName", "")} for g in runpod_sdk.gpu_types(key)]
        gpu_id = resolve_gpu(gpu_asked, offered, ALIASES, provider="runpod")
        info = runpod_sdk.gpu(key, gpu_id, count)
        field = "communityPrice" if self.cloud_type == "COMMUNITY" else "securePrice"
        price = info.get(field)
        if count > int(info.get("maxGpuCount") or count):
            raise InputError(f"{gpu_id} comes at most {info['maxGpuCount']} to a pod", field="gpus")
        return common.quote("runpod", gpu_id, float(price) if price else None, storage_usd=storage, live=True,
                            source=f"runpod gpuTypes({gpu_id}).{field}; {storage_note}",
                            reason=None if price else f"RunPod lists no {self.cloud_type} on-demand price for "
                                                      f"{gpu_id}", **shown)

    # ------------------------------------------------------------------------------------------------- jobs
    def _find(self, key: str, run_id: str) -> dict[str, Any] | None:
        name = common.resource_name(run_id)
        live = [p for p in runpod_sdk.pods(key) if p.get("name") == name and p.get("desiredStatus") != "TERMINATED"]
        return live[0] if live else None

    def launch(self, plan):
        key = self._key()
        run_id = plan["run_id"]
        existing = self._find(key, run_id)
        if existing:
            return self._attached(existing)
        if len(plan["bundle"]["b64"]) > BUNDLE_LIMIT:
            raise InputError(f"the workspace bundle is {len(plan['bundle']['b64'])} bytes; runpod carries at most "
                             f"{BUNDLE_LIMIT} in the pod environment (split or shrink the dataset)", field="dataset")
        created = time.time()
        deadline = common.deadline_for(plan, created)
        pod = self._create(key, run_id, created, deadline, image=common.pinned_image(plan["image"]),
                           gpu=plan["gpu"]["id"],
                           count=int(plan["gpu"]["count"]), disk_gb=int(plan["config"].get("storage_gb") or 20),
                           command=jobs.POD_COMMAND,
                           extra={jobs.BUNDLE_ENV: plan["bundle"]["b64"],
                                  jobs.BUNDLE_SHA_ENV: plan["bundle"]["sha256"]})
        return {"job_id": pod["id"], "created_at": float(f"{created:.0f}"), "deadline_at": float(f"{deadline:.0f}"),
                "attached": False}

    def _create(self, key: str, name_id: str, created: float, deadline: float, *, image: str, gpu: str, count: int,
                disk_gb: int, command: str, extra: dict[str, str]) -> dict[str, Any]:
        """A pod named stateset-NAME_ID whose environment carries the id, the deadline and a fresh token."""
        env = {jobs.RUN_ID_ENV: name_id, jobs.DEADLINE_ENV: f"{deadline:.0f}",
               "STATESET_CREATED_AT": f"{created:.0f}", jobs.TOKEN_ENV: secrets.token_hex(16),
               jobs.PROVIDER_ENV: "runpod", jobs.PORT_ENV: str(PORT), **extra}
        return runpod_sdk.create_pod(
            key, name=common.resource_name(name_id), image_name=image, gpu_type_id=gpu, cloud_type=self.cloud_type,
            gpu_count=count, container_disk_in_gb=disk_gb, volume_in_gb=0, ports=f"{PORT}/http", env=env,
            support_public_ip=False, start_ssh=False, docker_args=command)

    def _attached(self, pod: dict[str, Any]) -> dict[str, Any]:
        env = _env_dict(pod)
        return {"job_id": pod["id"], "created_at": float(env.get("STATESET_CREATED_AT", 0)),
                "deadline_at": float(env.get(jobs.DEADLINE_ENV, 0)), "attached": True}

    def _worker(self, pod: dict[str, Any], path: str, data: bytes | None = None, *, method: str | None = None,
                timeout: float = 30.0) -> bytes | None:
        url = os.environ.get(PROXY_ENV, PROXY_DEFAULT).format(pod_id=pod["id"], port=PORT) + path
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Authorization": f"Bearer {_env_dict(pod)[jobs.TOKEN_ENV]}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            if data is None:
                return None
            why = exc.read()[:300].decode(errors="replace")
            raise StatesetError(f"the pod refused {path.split('?')[0]}: {why}") from None
        except (urllib.error.URLError, OSError, TimeoutError):
            return None  # not up yet, or gone: the pod's own state decides

    def status(self, run_id):
        key = self._key()
        pod = self._find(key, run_id)
        if pod is None:
            return {"run_id": run_id, "state": "missing", "uptime_s": 0, "cost_per_hour": 0.0}
        rate, uptime = float(pod.get("costPerHr") or 0.0), float(pod.get("uptimeSeconds") or 0.0)
        state = _STATE.get(pod.get("desiredStatus"), "pending")
        message = "the pod exited before the job finished" if state == "failed" else None
        reported: dict[str, Any] = {}
        if state == "running":
            body = self._worker(pod, "/status")
            reported = json.loads(body) if body else {}
            state = reported.get("state", "running" if uptime else "pending")
            message = reported.get("message")
        return {"run_id": run_id, "job_id": pod["id"], "state": state, "message": message, "uptime_s": uptime,
                "cost_per_hour": rate, "spend_usd": round(rate * uptime / 3600.0, 6),
                "ready": bool(reported.get("ready")), **common.reported(reported)}

    def stop(self, run_id):
        """Cooperative: POST /stop on the pod's worker, which saves at the next safe boundary and ends."""
        pod = self._find(self._key(), run_id)
        if pod is None:
            return {"run_id": run_id, "requested": False, "message": "no such pod"}
        if _STATE.get(pod.get("desiredStatus")) != "running":
            return {"run_id": run_id, "requested": False, "message": f"the pod is {pod.get('desiredStatus')}"}
        body = self._worker(pod, "/stop", b"{}", method="POST")
        if body is None:
            return {"run_id": run_id, "requested": False, "message": "the pod's worker does not answer (yet)"}
        answer = json.loads(body or b"{}")
        return {"run_id": run_id, "requested": bool(answer.get("requested", True)),
                "message": answer.get("message") or "the worker saves a full checkpoint after the current update "
                                                    "and ends (state stopped)"}

    def logs(self, request):
        """The job's events.jsonl from `offset`, through the pod's worker (GET /logs answers the raw bytes)."""
        pod = self._find(self._key(), request["run_id"])
        offset = max(0, int(request.get("offset") or 0))
        length = min(int(request.get("length") or common.LOG_SLICE), common.LOG_SLICE)  # the worker's most
        body = self._worker(pod, f"/logs?offset={offset}&length={length}") if pod else None
        if body is None:  # no pod (nothing more will come), or its worker is not up yet
            return {"data_b64": "", "offset": offset, "eof": pod is None}
        return {"data_b64": base64.b64encode(body).decode(), "offset": offset + len(body), "eof": len(body) < length}

    def terminate(self, run_id):
        key = self._key()
        pod = self._find(key, run_id)
        if pod is None:
            return {"run_id": run_id, "terminated": False}
        runpod_sdk.terminate_pod(key, pod["id"])  # terminate, never stop: a stopped pod still bills its disk
        return {"run_id": run_id, "terminated": True, "job_id": pod["id"]}

    def list_jobs(self):
        key = self._key()
        found = []
        for pod in runpod_sdk.pods(key):
            run_id = common.run_id_of(pod.get("name", ""))
            if run_id and pod.get("desiredStatus") != "TERMINATED":
                uptime, rate = float(pod.get("uptimeSeconds") or 0), float(pod.get("costPerHr") or 0)
                found.append({"run_id": run_id, "job_id": pod["id"], "state": _STATE.get(pod.get("desiredStatus"),
                                                                                         "pending"),
                              "uptime_s": uptime, "cost_per_hour": rate,
                              "deadline_at": float(_env_dict(pod).get(jobs.DEADLINE_ENV, 0))})
        return found

    def artifacts(self, request):
        pod = self._find(self._key(), request["run_id"])
        body = self._worker(pod, "/receipt") if pod else None
        if body is None:
            return {"run_id": request["run_id"], "state": "missing", "files": []}
        return json.loads(body)

    def read_artifact(self, request):
        pod = self._find(self._key(), request["run_id"])
        if pod is None:
            raise StatesetError(f"run {request['run_id']}: the pod is gone; its artifacts went with it")
        query = urllib.parse.urlencode({"offset": int(request.get("offset") or 0),
                                        "length": int(request.get("length") or (1 << 20))})
        data = self._worker(pod, f"/files/{urllib.parse.quote(request['path'])}?{query}")
        if data is None:
            raise StatesetError(f"run {request['run_id']}: cannot read {request['path']} from the pod")
        return {"data_b64": base64.b64encode(data).decode(), "eof": len(data) < int(request.get("length") or 1 << 20)}

    # ------------------------------------------------------------------------------------------------------ chat
    def chat_open(self, request):
        key = self._key()
        session_id, quote = request["session_id"], request["quote"]
        self._listings[session_id] = request["adapter"]  # uploaded by the first turn, once the pod answers
        existing = self._find(key, session_id)  # a lost create response: the pod is there under its name
        if existing:
            return self._attached(existing)
        created = time.time()
        deadline = created + float(request["max_minutes"]) * 60.0
        pod = self._create(key, session_id, created, deadline, image=common.pinned_image(quote["image"]),
                           gpu=quote["gpu"],
                           count=1, disk_gb=int(request["storage_gb"]),
                           command=jobs.CHAT_POD_COMMAND, extra={})
        return {"job_id": pod["id"], "created_at": float(f"{created:.0f}"), "deadline_at": float(f"{deadline:.0f}"),
                "attached": False}

    def _chat_pod(self, session_id: str) -> dict[str, Any]:
        pod = self._find(self._key(), session_id)
        if pod is None:
            raise StatesetError(f"chat session {session_id}: its pod is gone")
        return pod

    def _install(self, pod: dict[str, Any], listing: dict[str, Any]) -> None:
        """Upload the adapter in slices unless the pod already holds exactly these files, then install it."""
        body = self._worker(pod, "/status")
        if body and json.loads(body).get("adapter_sha256") == listing["sha256"]:
            return
        root = Path(listing["dir"])
        for entry in listing["files"]:
            with open(root / entry["path"], "rb") as f:
                offset = 0
                while True:
                    part = f.read(UPLOAD_SLICE)
                    if offset and not part:
                        break
                    path = f"/upload/{urllib.parse.quote(entry['path'])}?offset={offset}"
                    if self._worker(pod, path, part, method="PUT", timeout=300) is None:
                        raise StatesetError(f"cannot upload {entry['path']} to the chat pod")
                    offset += len(part)
                    if len(part) < UPLOAD_SLICE:
                        break
        installed = self._worker(pod, "/install", json.dumps({"sha256": listing["sha256"],
                                                              "files": listing["files"]}).encode(), method="POST")
        if installed is None or json.loads(installed).get("adapter_sha256") != listing["sha256"]:
            raise StatesetError("the chat pod did not install the adapter")

    def chat_turn(self, request):
        listing = self._listings.get(request["session_id"])
        if listing is None:
            raise StatesetError(f"chat session {request['session_id']} was not opened by this process")
        pod = self._chat_pod(request["session_id"])
        self._install(pod, listing)
        turn = {k: v for k, v in request.items() if k != "session_id"}
        body = self._worker(pod, "/chat", json.dumps(turn).encode(), method="POST", timeout=TURN_TIMEOUT_S)
        if body is None:
            raise StatesetError(f"chat session {request['session_id']}: the pod did not answer")
        return json.loads(body)
