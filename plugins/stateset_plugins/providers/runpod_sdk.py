"""The one module that touches the `runpod` SDK (imported lazily, here only).

The SDK speaks RunPod's GraphQL API at $RUNPOD_API_BASE_URL (default https://api.runpod.io), which is how the
tests point it at a local fake. `create_pod` and `terminate_pod` read the module-global key, so it is set per call.
"""
from __future__ import annotations

import functools
from typing import Any

from stateset_agents.core.errors import StatesetError


def _api(what: str):
    """RunPod's API failing (a 5xx, a timeout, a dropped connection, a cut or malformed answer, a GraphQL error) is
    a StatesetError naming the call, never the SDK's exception: the kernel reports it, and its callers (a launch,
    a watch) decide; a create whose answer is lost is found again by the pod's name."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except StatesetError:
                raise
            except Exception as exc:  # noqa: BLE001 - requests', json's and the SDK's errors alike
                detail = str(exc).splitlines()[0][:300] if str(exc) else ""
                raise StatesetError(f"runpod API {what} failed: {type(exc).__name__}: {detail}") from None
        return call
    return wrap


def _sdk(api_key: str):
    import runpod

    runpod.api_key = api_key
    return runpod


@_api("gpuTypes")
def gpu_types(api_key: str) -> list[dict[str, Any]]:
    return list(_sdk(api_key).get_gpus(api_key=api_key))


@_api("gpuTypes(id)")
def gpu(api_key: str, gpu_id: str, count: int) -> dict[str, Any]:
    return dict(_sdk(api_key).get_gpu(gpu_id, count, api_key=api_key))


@_api("myself.pods")
def pods(api_key: str) -> list[dict[str, Any]]:
    return list(_sdk(api_key).get_pods(api_key=api_key) or [])


@_api("pod(id)")
def pod(api_key: str, pod_id: str) -> dict[str, Any] | None:
    return _sdk(api_key).get_pod(pod_id, api_key=api_key)


@_api("podFindAndDeployOnDemand")
def create_pod(api_key: str, **kwargs: Any) -> dict[str, Any]:
    return dict(_sdk(api_key).create_pod(**kwargs))


@_api("podTerminate")
def terminate_pod(api_key: str, pod_id: str) -> None:
    _sdk(api_key).terminate_pod(pod_id)
