"""The one module that touches the `runpod` SDK (imported lazily, here only).

The SDK speaks RunPod's GraphQL API at $RUNPOD_API_BASE_URL (default https://api.runpod.io), which is how the
tests point it at a local fake. `create_pod` and `terminate_pod` read the module-global key, so it is set per call.
"""
from __future__ import annotations

from typing import Any


def _sdk(api_key: str):
    import runpod

    runpod.api_key = api_key
    return runpod


def gpu_types(api_key: str) -> list[dict[str, Any]]:
    return list(_sdk(api_key).get_gpus(api_key=api_key))


def gpu(api_key: str, gpu_id: str, count: int) -> dict[str, Any]:
    return dict(_sdk(api_key).get_gpu(gpu_id, count, api_key=api_key))


def pods(api_key: str) -> list[dict[str, Any]]:
    return list(_sdk(api_key).get_pods(api_key=api_key) or [])


def pod(api_key: str, pod_id: str) -> dict[str, Any] | None:
    return _sdk(api_key).get_pod(pod_id, api_key=api_key)


def create_pod(api_key: str, **kwargs: Any) -> dict[str, Any]:
    return dict(_sdk(api_key).create_pod(**kwargs))


def terminate_pod(api_key: str, pod_id: str) -> None:
    _sdk(api_key).terminate_pod(pod_id)
