"""Training jobs over the gateway, on SQLite and on a real PostgreSQL: a job submitted to a `stateset-agents serve`
subprocess, the gateway killed with SIGKILL mid-job and started again (the job reattached, never doubled), its
events streamed over SSE, stopped cooperatively at a checkpoint; another job cancelled; a second owner refused."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

pytest.importorskip("prometheus_client")


def _serve(registry: Path, database: str, tiny: Path, port: int, log: Path, cwd: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "stateset_agents", "serve", "--registry", str(registry), "--base-model", str(tiny),
            "--port", str(port), "--database", database, "--device", "cpu", "--max-new-tokens", "8"]
    env = {**os.environ, "STATESET_AGENTS_STATE_DIR": str(log.parent / "state")}  # the server's runs, ledger
    # cwd: the folder the jobs may name files in (the data and the tiny model lie under the tests' temp root)
    child = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env, cwd=cwd)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise AssertionError(f"the gateway exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return child
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    child.kill()
    raise AssertionError(f"the gateway did not get ready: {log.read_text()[-2000:]}")


def _workers(job_id: str) -> list[int]:
    """The live worker processes of a job, from every process's command line."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if b"stateset_agents.gateway.job_worker" in argv and job_id.encode() in argv and state != "Z":
                found.append(int(proc.name))
    return found


@pytest.fixture(scope="module")
def jobs_gw(database, tiny_model_dir, tmp_path_factory):
    from stateset_agents.gateway.keys import create_key
    from stateset_agents.gateway.server import free_port
    from tests.evidence.evidence_helpers import write_jsonl
    from tests.helpers.toy_rewards import make_rows

    root = tmp_path_factory.mktemp("jobs")
    registry = root / "registry"
    registry.mkdir()
    keys = {name: create_key(registry, name, scope, database=database)[0] for name, scope in
            (("bob", "train"), ("carol", "train"), ("ops", "admin"))}
    data = write_jsonl(root / "curated.jsonl", make_rows())
    port = free_port()
    base = tmp_path_factory.getbasetemp()
    state = SimpleNamespace(url=f"http://127.0.0.1:{port}", keys=keys, data=data, root=root, port=port,
                            start=lambda: _serve(registry, database, tiny_model_dir, port, root / "serve.log", base),
                            tiny=tiny_model_dir, database=database)
    state.server = state.start()
    yield state
    state.server.kill()
    state.server.wait()
    for job in (root / "registry" / ".jobs").glob("job_*"):
        for pid in _workers(job.name):
            os.killpg(pid, signal.SIGKILL)


def call(gw, method, path, who="bob", **kw):
    return httpx.request(method, gw.url + path, headers={"authorization": f"Bearer {gw.keys[who]}"}, timeout=60,
                         **kw)


def submit(gw, steps=5000):
    body = {"kind": "train", "algorithm": "sft", "reward": "gsm8k", "dataset": str(gw.data),
            "base_model": str(gw.tiny), "steps": steps, "save_every": 1000, "config": {"device": "cpu"}}
    answer = call(gw, "POST", "/training/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


def wait_for(gw, job_id, test, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = call(gw, "GET", f"/training/jobs/{job_id}").json()
        if test(status):
            return status
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}: {status}")


def test_a_job_survives_a_killed_gateway_is_streamed_and_stops_at_a_checkpoint(jobs_gw):
    gw = jobs_gw
    job = submit(gw)
    running = wait_for(gw, job["id"], lambda s: (s["metrics"].get("step") or 0) >= 1 and s["state"] == "running")
    [worker] = _workers(job["id"])
    gw.server.send_signal(signal.SIGKILL)  # mid-job: no shutdown of any kind
    gw.server.wait()
    time.sleep(0.5)
    assert _workers(job["id"]) == [worker]  # the worker lives on in its own session
    gw.server = gw.start()
    again = call(gw, "GET", f"/training/jobs/{job['id']}").json()
    assert again["state"] == "running" and again["attempts"] == 1  # reattached, not started a second time
    assert _workers(job["id"]) == [worker]
    assert len([j for j in call(gw, "GET", "/training/jobs").json()["data"] if j["id"] == job["id"]]) == 1
    assert (again["metrics"].get("step") or 0) >= (running["metrics"].get("step") or 0)
    # another owner neither sees nor controls it
    for method, path in (("GET", ""), ("POST", "/stop"), ("POST", "/cancel"), ("GET", "/events")):
        assert call(gw, method, f"/training/jobs/{job['id']}{path}", who="carol").status_code == 404
    assert job["id"] not in {j["id"] for j in call(gw, "GET", "/training/jobs", who="carol").json()["data"]}
    assert job["id"] in {j["id"] for j in call(gw, "GET", "/training/jobs", who="ops").json()["data"]}
    events, stopped = [], False
    with httpx.stream("GET", f"{gw.url}/training/jobs/{job['id']}/events",
                      headers={"authorization": f"Bearer {gw.keys['bob']}"}, timeout=120) as stream:
        kind = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                events.append((kind, json.loads(line[6:])))
                if not stopped and kind in ("progress", "metrics"):
                    answer = call(gw, "POST", f"/training/jobs/{job['id']}/stop")
                    assert answer.status_code == 200 and answer.json()["requested"], answer.text
                    stopped = True
                if kind == "end":
                    break
    assert events[-1] == ("end", {"state": "stopped", "message": events[-1][1]["message"]})
    assert any(k == "progress" for k, _ in events)
    final = call(gw, "GET", f"/training/jobs/{job['id']}").json()
    assert final["state"] == "stopped" and final["stop_requested"] and final["attempts"] == 1
    assert final["checkpoints"] and final["checkpoints"][-1]["complete"], final["checkpoints"]
    assert final["metrics"]["step"] < 5000
    assert call(gw, "POST", f"/training/jobs/{job['id']}/stop").status_code == 409
    text = call(gw, "GET", "/metrics", who="ops").text
    assert 'gateway_jobs{state="stopped"} 1.0' in text


def test_a_job_is_cancelled_and_a_claimed_job_is_never_started_again(jobs_gw):
    gw = jobs_gw
    job = submit(gw)
    wait_for(gw, job["id"], lambda s: s["state"] == "running")
    cancelled = call(gw, "POST", f"/training/jobs/{job['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    deadline = time.monotonic() + 10
    while _workers(job["id"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _workers(job["id"]) == []
    assert call(gw, "POST", f"/training/jobs/{job['id']}/cancel").status_code == 409
    # a worker presenting a stale claim does not take the job
    from stateset_agents.gateway.job_worker import main as worker

    database = gw.server.args[gw.server.args.index("--database") + 1]
    assert worker(["--database", database, "--job", job["id"], "--token", "not-the-claim"]) == 0
    assert call(gw, "GET", f"/training/jobs/{job['id']}").json()["state"] == "cancelled"


@pytest.mark.parametrize("body, field", [
    ({"kind": "train"}, "dataset"), ({"kind": "fly"}, "kind"), ({"kind": "train", "dataset": 3}, "dataset"),
    ({"kind": "train", "dataset": "x", "algorithm": "nope"}, "algorithm"),
    ({"kind": "train", "dataset": "x", "colour": 1}, "colour"),
    ({"kind": "train-remote", "config": {"provider": "local"}}, "config.max_cost_usd")])
def test_bad_job_bodies_are_refused_naming_the_field(jobs_gw, body, field):
    answer = call(jobs_gw, "POST", "/training/jobs", json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == field


def test_an_infer_key_cannot_submit_jobs(jobs_gw, tmp_path):
    from stateset_agents.gateway.keys import create_key

    key = create_key(jobs_gw.root / "registry", "dave", "infer", database=jobs_gw.database)[0]
    answer = httpx.post(jobs_gw.url + "/training/jobs", headers={"authorization": f"Bearer {key}"},
                        json={"kind": "train", "dataset": "x"})
    assert answer.status_code == 403 and "train" in answer.json()["error"]["message"]
    assert httpx.get(jobs_gw.url + "/training/jobs").status_code == 401


def test_a_train_remote_plan_is_quoted_first_capped_and_run_through_the_run_control(jobs_gw):
    gw = jobs_gw
    config = {"provider": "local", "dataset": str(gw.data), "base_model": str(gw.tiny), "algorithm": "sft",
              "reward": "gsm8k", "max_hours": 0.5,
              "training": {"steps": 1, "batch_size": 2, "max_new_tokens": 4, "save_every": 1}}
    refused = call(gw, "POST", "/training/jobs", json={"kind": "train-remote", "config": {**config,
                                                                                          "max_cost_usd": 0}})
    assert refused.status_code == 400 and "refused" in refused.json()["error"]["message"], refused.text
    before = set((gw.root / "registry" / ".jobs").iterdir())
    answer = call(gw, "POST", "/training/jobs", json={"kind": "train-remote", "config": {**config,
                                                                                         "max_cost_usd": 1}})
    assert answer.status_code == 201, answer.text
    job = answer.json()
    assert job["quote"]["worst_case_usd"] == 0.0 and job["quote"]["quote"]["provider"] == "local"
    assert job["run_id"] == job["quote"]["run_id"]
    done = wait_for(gw, job["id"], lambda s: s["state"] not in ("queued", "starting", "running"), timeout=240)
    assert done["state"] == "succeeded", (done, (gw.root / "registry" / ".jobs" / job["id"] / "worker.log")
                                          .read_text()[-1500:])
    run = gw.root / "registry" / ".jobs" / job["id"] / "run"
    receipt = json.loads((run / "remote_receipt.json").read_text())
    assert receipt["run_id"] == job["run_id"] and receipt["spend_usd"] == 0.0
    assert len(set((gw.root / "registry" / ".jobs").iterdir()) - before) == 1  # the refused plan left nothing
    kinds = [json.loads(x).get("type") for x in (run.parent / "events.jsonl").read_text().splitlines()]
    assert "completed" in kinds or "metrics" in kinds
