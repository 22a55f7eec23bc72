"""Fixtures for the provider tests: a private state dir, a plan config, and a fake of RunPod's GraphQL API that the
real `runpod` SDK talks to (through RUNPOD_API_BASE_URL), served on 127.0.0.1 by a threaded HTTP server.

With `run_pods` set, a created pod is a real local process: the pod's docker_args command with the pod's
environment, on a free loopback port, reached through the fake's own stand-in for RunPod's HTTPS proxy
(`/proxy/POD_ID-PORT/...`, which STATESET_RUNPOD_PROXY_URL points at). Terminating the pod kills the process."""
from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

GPUS = [{"id": "NVIDIA H100 80GB HBM3", "displayName": "H100 SXM", "memoryInGb": 80, "securePrice": 2.99},
        {"id": "NVIDIA H100 PCIe", "displayName": "H100 PCIe", "memoryInGb": 80, "securePrice": 2.39},
        {"id": "NVIDIA A40", "displayName": "A40", "memoryInGb": 48, "securePrice": 0.44},
        {"id": "NVIDIA A100 80GB PCIe", "displayName": "A100 PCIe", "memoryInGb": 80, "securePrice": 1.64},
        {"id": "NVIDIA L4", "displayName": "L4", "memoryInGb": 24, "securePrice": None}]
from tests.helpers.state_dir import state_dir  # noqa: F401 - autouse: a private kernel state dir per test
from tests.providers.provider_helpers import FAULTS, IMAGE  # noqa: F401 - shared with the test modules


@pytest.fixture()
def dataset(tmp_path) -> Path:
    rows = [{"prompt": [{"role": "user", "content": f"what is {i} + 1"}],
             "completion": [{"role": "assistant", "content": f"it is {i + 1}"}]} for i in range(6)]
    path = tmp_path / "curated.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


class FakeRunPod:
    """Just enough of RunPod's GraphQL API for the SDK calls the plugin makes; records every mutation."""

    def __init__(self):
        self.pods: dict[str, dict] = {}
        self.creates = 0
        self.terminated: list[str] = []
        self.lose_next_create_response = False
        self.exit_on_create = False  # a created pod is EXITED at once (its container ended): the run fails fast
        self.lock = threading.Lock()
        self.run_pods = False
        self.processes: dict[str, tuple[subprocess.Popen, int]] = {}
        self.api_url = ""
        #: Injected faults, by the number of the API call they hit (1 = the next one; see `fail_call`).
        self.faults: dict[int, str] = {}
        self.api_calls = 0
        self.fault_delay_s = 1.5  # "timeout": how late the answer comes (the tests shorten the client's timeout)

    def answer(self, query: str):
        with self.lock:
            if "podFindAndDeployOnDemand" in query:
                return self._create(query)
            if m := re.search(r'podTerminate\(input: \{ podId: "([^"]+)" \}\)', query):
                self.terminated.append(m.group(1))
                self.pods.pop(m.group(1), None)
                self._kill(m.group(1))
                return {"data": {"podTerminate": None}}
            if m := re.search(r'gpuTypes\(input: \{id: "([^"]+)"\}\)', query):
                found = [dict(g, maxGpuCount=8, communityPrice=None) for g in GPUS if g["id"] == m.group(1)]
                return {"data": {"gpuTypes": found}}
            if "gpuTypes" in query:
                return {"data": {"gpuTypes": [{k: g[k] for k in ("id", "displayName", "memoryInGb")} for g in GPUS]}}
            if m := re.search(r'pod\(input: \{podId: "([^"]+)"\}\)', query):
                return {"data": {"pod": self.pods.get(m.group(1))}}
            if "myself" in query and "pods" in query:
                return {"data": {"myself": {"pods": list(self.pods.values())}}}
        return {"errors": [{"message": f"fake cannot answer: {query[:80]}"}]}

    def _create(self, query: str):
        self.creates += 1
        name = re.search(r'name: "([^"]+)"', query).group(1)
        gpu = re.search(r'gpuTypeId: "([^"]+)"', query).group(1)
        env = [f"{k}={v}" for k, v in re.findall(r'\{ key: "([^"]*)", value: "([^"]*)" \}', query)]
        pod_id = f"pod{self.creates:03d}"
        price = next(g["securePrice"] for g in GPUS if g["id"] == gpu)
        self.pods[pod_id] = {"id": pod_id, "name": name, "costPerHr": price,
                             "desiredStatus": "EXITED" if self.exit_on_create else "RUNNING",
                             "uptimeSeconds": 0, "env": env, "imageName": re.search(r'imageName: "([^"]+)"',
                                                                                     query).group(1)}
        if self.run_pods:
            self._start(pod_id, re.search(r'dockerArgs: "([^"]*)"', query).group(1), dict(
                item.split("=", 1) for item in env))
        if self.lose_next_create_response:
            self.lose_next_create_response = False
            return None  # the pod exists, but the client never hears about it
        return {"data": {"podFindAndDeployOnDemand": {"id": pod_id, "imageName": "", "env": env, "machineId": "m",
                                                      "machine": {"podHostId": "h"}}}}

    def fail_call(self, number: int, fault: str) -> None:
        """Make API call `number` from now fail: "500" (refused, nothing done), or done and then its answer lost:
        "timeout" (it comes too late), "drop" (the connection closes without one), "partial" (cut mid-JSON)."""
        assert fault in FAULTS, fault
        self.faults[self.api_calls + number] = fault

    def env_of(self, pod_id: str) -> dict[str, str]:
        return dict(item.split("=", 1) for item in self.pods[pod_id]["env"])

    def _start(self, pod_id: str, command: str, env: dict[str, str]) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        argv = shlex.split(command)
        argv[0] = sys.executable if argv[0] == "python" else argv[0]
        job = tempfile.mkdtemp(prefix=f"fake-{pod_id}-")
        proc = subprocess.Popen(argv, env={**os.environ, **env, "STATESET_PORT": str(port), "STATESET_JOB_DIR": job,
                                           "RUNPOD_API_KEY": "test-key", "RUNPOD_API_BASE_URL": self.api_url},
                                stdin=subprocess.DEVNULL, start_new_session=True)
        self.processes[pod_id] = (proc, port)

    def _kill(self, pod_id: str) -> None:
        proc, _ = self.processes.get(pod_id, (None, 0))
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def proxy(self, method: str, path: str, headers, body: bytes | None) -> tuple[int, bytes]:
        """RunPod's proxy: /proxy/POD_ID-PORT/REST goes to the pod's port; 502 while nothing listens there."""
        m = re.match(r"/proxy/([^/-]+)-(\d+)(/.*)", path)
        proc, port = self.processes.get(m.group(1), (None, 0)) if m else (None, 0)
        if proc is None or proc.poll() is not None:
            return 502, b"no pod"
        req = urllib.request.Request(f"http://127.0.0.1:{port}{m.group(3)}", data=body, method=method,
                                     headers={"Authorization": headers.get("Authorization", "")})
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (urllib.error.URLError, OSError):
            return 502, b"pod not answering"


@pytest.fixture()
def fake_runpod(monkeypatch):
    pytest.importorskip("runpod")
    fake = FakeRunPod()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _proxied(self, method):
            length = int(self.headers.get("Content-Length") or 0)
            code, data = fake.proxy(method, self.path, self.headers, self.rfile.read(length) if length else None)
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._proxied("GET")

        def do_PUT(self):
            self._proxied("PUT")

        def do_POST(self):
            if self.path.startswith("/proxy/"):
                return self._proxied("POST")
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.headers.get("Authorization") != "Bearer test-key":
                self.send_response(401)
                self.end_headers()
                return
            with fake.lock:
                fake.api_calls += 1
                fault = fake.faults.pop(fake.api_calls, None)
            if fault == "500":
                self.send_response(500)
                self.send_header("Content-Length", "21")
                self.end_headers()
                self.wfile.write(b"internal server error")
                return
            answer = fake.answer(body["query"])
            if fault == "drop":  # done, and the connection closes before any answer
                self.close_connection = True
                return
            if fault == "timeout":
                time.sleep(fake.fault_delay_s)
            if fault == "partial":
                data = json.dumps(answer).encode()
                data = data[:len(data) // 2]
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            if answer is None:
                self.send_response(502)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")
                return
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake.api_url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("RUNPOD_API_BASE_URL", fake.api_url)
    monkeypatch.setenv("RUNPOD_API_KEY", "test-key")
    yield fake
    for pod_id in list(fake.processes):
        fake._kill(pod_id)
    server.shutdown()
