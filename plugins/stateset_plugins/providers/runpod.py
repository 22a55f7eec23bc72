"""`provider:runpod`: a GPU pod running the trainer image, priced by RunPod's API, named and labelled by run id.

* Quote: `gpuTypes(id)` `securePrice` (or `communityPrice` with provider_config.cloud_type COMMUNITY) per GPU-hour,
  plus disk at the storage rate below. A GPU with no on-demand price there is refused, not guessed.
* Launch: look the pod named stateset-RUN_ID up first; create only when there is none. The pod's environment
  carries the run id, the deadline (the worker self-terminates the pod at it, with the pod's own RUNPOD_API_KEY),
  a per-run token and the workspace bundle (so a bundle must stay under BUNDLE_LIMIT).
* Artifacts: the worker serves /receipt and /files on port 8765 behind RunPod's HTTPS proxy, token-protected.
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
from typing import Any

from stateset_agents import Provider
from stateset_agents.errors import InputError, StatesetError
from stateset_agents.remote import worker
from stateset_agents.remote.gpus import resolve_gpu

from . import VERSION, common, runpod_sdk

KEY_ENV = "RUNPOD_API_KEY"
PROXY_ENV = "STATESET_RUNPOD_PROXY_URL"  # "{pod_id}" and "{port}" are filled in
PROXY_DEFAULT = "https://{pod_id}-{port}.proxy.runpod.net"
PORT = 8765
DEFAULT_IMAGE = None  # no published digest yet: the config must pin one
STORAGE_AS_OF = "2025-06-01"
STORAGE_USD_PER_GB_MONTH = 0.10  # RunPod container/volume disk while running, from its pricing page on that date
BUNDLE_LIMIT = 512 * 1024
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

    def _key(self) -> str:
        return common.require_env(KEY_ENV, how="create an API key in the RunPod console (Settings > API Keys) and "
                                                "export RUNPOD_API_KEY")

    @property
    def cloud_type(self) -> str:
        return str(self.config.get("cloud_type", "SECURE")).upper()

    def quote(self, plan):
        key = self._key()
        offered = [{"id": g["id"], "name": g.get("displayName", "")} for g in runpod_sdk.gpu_types(key)]
        if not plan.get("gpu"):
            raise InputError(f"--gpu is required for runpod; choose one of: {', '.join(o['id'] for o in offered)}",
                             field="gpu")
        gpu_id = resolve_gpu(plan["gpu"], offered, ALIASES, provider="runpod")
        count = int(plan.get("gpus") or 1)
        info = runpod_sdk.gpu(key, gpu_id, count)
        field = "communityPrice" if self.cloud_type == "COMMUNITY" else "securePrice"
        price = info.get(field)
        if count > int(info.get("maxGpuCount") or count):
            raise InputError(f"{gpu_id} comes at most {info['maxGpuCount']} to a pod", field="gpus")
        storage = float(plan.get("storage_gb") or 0) * STORAGE_USD_PER_GB_MONTH * float(plan["max_hours"]) / 730.0
        image = common.pinned_image(plan.get("image"), DEFAULT_IMAGE)
        return common.quote("runpod", gpu_id, float(price) if price else None, storage_usd=storage, image=image,
                            source=f"runpod gpuTypes({gpu_id}).{field}; storage ${STORAGE_USD_PER_GB_MONTH}/GB-month "
                                   f"as of {STORAGE_AS_OF}",
                            reason=None if price else f"RunPod lists no {self.cloud_type} on-demand price for "
                                                      f"{gpu_id}", cloud_type=self.cloud_type)

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
            env = _env_dict(existing)
            return {"job_id": existing["id"], "created_at": float(env.get("STATESET_CREATED_AT", 0)),
                    "deadline_at": float(env.get(worker.DEADLINE_ENV, 0)), "attached": True}
        if len(plan["bundle"]["b64"]) > BUNDLE_LIMIT:
            raise InputError(f"the workspace bundle is {len(plan['bundle']['b64'])} bytes; runpod carries at most "
                             f"{BUNDLE_LIMIT} in the pod environment (split or shrink the dataset)", field="dataset")
        created = time.time()
        deadline = common.deadline_for(plan, created)
        env = {worker.RUN_ID_ENV: run_id, worker.DEADLINE_ENV: f"{deadline:.0f}", "STATESET_CREATED_AT": f"{created:.0f}",
               worker.TOKEN_ENV: secrets.token_hex(16), worker.PROVIDER_ENV: "runpod",
               worker.BUNDLE_ENV: plan["bundle"]["b64"], worker.BUNDLE_SHA_ENV: plan["bundle"]["sha256"],
               "STATESET_PORT": str(PORT)}
        pod = runpod_sdk.create_pod(
            key, name=common.resource_name(run_id), image_name=plan["image"]["ref"], gpu_type_id=plan["gpu"]["id"],
            cloud_type=self.cloud_type, gpu_count=int(plan["gpu"]["count"]),
            container_disk_in_gb=int(plan["config"].get("storage_gb") or 20), volume_in_gb=0,
            ports=f"{PORT}/http", env=env, support_public_ip=False, start_ssh=False,
            docker_args="python -m stateset_agents.remote.worker pod")
        return {"job_id": pod["id"], "created_at": float(f"{created:.0f}"), "deadline_at": float(f"{deadline:.0f}"),
                "attached": False}

    def _worker(self, pod: dict[str, Any], path: str) -> bytes | None:
        url = os.environ.get(PROXY_ENV, PROXY_DEFAULT).format(pod_id=pod["id"], port=PORT) + path
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {_env_dict(pod)[worker.TOKEN_ENV]}"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.read()
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
        if state == "running":
            body = self._worker(pod, "/status")
            reported = json.loads(body) if body else {}
            state = reported.get("state", "running" if uptime else "pending")
            message = reported.get("message")
        return {"run_id": run_id, "job_id": pod["id"], "state": state, "message": message, "uptime_s": uptime,
                "cost_per_hour": rate, "spend_usd": round(rate * uptime / 3600.0, 6)}

    def terminate(self, run_id):
        key = self._key()
        pod = self._find(key, run_id)
        if pod is None:
            return {"run_id": run_id, "terminated": False}
        runpod_sdk.terminate_pod(key, pod["id"])  # terminate, never stop: a stopped pod still bills its disk
        return {"run_id": run_id, "terminated": True, "job_id": pod["id"]}

    def list_jobs(self):
        key = self._key()
        jobs = []
        for pod in runpod_sdk.pods(key):
            run_id = common.run_id_of(pod.get("name", ""))
            if run_id and pod.get("desiredStatus") != "TERMINATED":
                uptime, rate = float(pod.get("uptimeSeconds") or 0), float(pod.get("costPerHr") or 0)
                jobs.append({"run_id": run_id, "job_id": pod["id"], "state": _STATE.get(pod.get("desiredStatus"),
                                                                                        "pending"),
                             "uptime_s": uptime, "cost_per_hour": rate,
                             "deadline_at": float(_env_dict(pod).get(worker.DEADLINE_ENV, 0))})
        return jobs

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
