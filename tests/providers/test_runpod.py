"""provider:runpod through the real `runpod` SDK against a local fake of RunPod's GraphQL API."""
from __future__ import annotations

import json

import pytest

from stateset_agents.core.errors import InputError
from stateset_agents.remote import session, state
from stateset_agents.remote.cap import CapExceeded
from stateset_agents.remote.worker import receipt_for, serve_files
from stateset_agents.core.runtimes import load_component
from tests.providers.provider_helpers import IMAGE


def _config(dataset, **over):
    return {"provider": "runpod", "dataset": str(dataset), "gpu": "H100", "gpus": 1, "max_hours": 2,
            "max_cost_usd": 10.0, "image": IMAGE, "algorithm": "sft", "reward": "gsm8k", **over}


@pytest.fixture()
def provider(fake_runpod):
    with load_component("provider:runpod") as p:
        yield p


def test_quote_uses_the_api_price_and_resolves_short_names(provider):
    q = provider.quote({"gpu": "h100", "gpus": 2, "max_hours": 2, "storage_gb": 20, "image": IMAGE})
    assert q["gpu"] == "NVIDIA H100 80GB HBM3" and q["usd_per_gpu_hour"] == 2.99 and q["priced"]
    assert "securePrice" in q["source"] and q["quoted_at"]
    with pytest.raises(InputError, match="is not offered by runpod; choose one of: .*NVIDIA A40"):
        provider.quote({"gpu": "TPU-v5", "max_hours": 1, "image": IMAGE})
    with pytest.raises(InputError, match="ambiguous.*H100 PCIe"):
        provider.quote({"gpu": "NVIDIA H100", "max_hours": 1, "image": IMAGE})
    # the price needs no image: an unpinned one is named in the quote, and refused later (at the latest, at launch)
    loose = provider.quote({"gpu": "A40", "max_hours": 1, "image": "ghcr.io/x/trainer:latest"})
    assert loose["priced"] and "not pinned by digest" in loose["image"]["problem"]
    assert q["image"] == {"name": IMAGE.split("@")[0], "digest": IMAGE.split("@")[1], "ref": IMAGE}


def test_refuses_above_the_cap_and_never_creates(provider, fake_runpod, dataset, tmp_path):
    with pytest.raises(CapExceeded, match=r"2.9900/GPU-hour x 1 x 4 h .* = \$11.97 worst case"):
        session.prepare(_config(dataset, max_hours=4, max_cost_usd=10.0), tmp_path / "ws", provider)
    assert fake_runpod.creates == 0 and not (tmp_path / "ws" / "plan.json").exists()
    # its worker trains on one GPU: N > 1 is refused before the quote, never billed for N and trained on 1
    with pytest.raises(InputError, match="--gpus 2: provider runpod runs the trainer as one process"):
        session.prepare(_config(dataset, gpus=2, max_cost_usd=100.0), tmp_path / "ws", provider)
    assert fake_runpod.creates == 0 and not (tmp_path / "ws" / "plan.json").exists()
    for bad in (0, -5):
        with pytest.raises(InputError, match="max_cost_usd"):
            session.prepare(_config(dataset, max_cost_usd=bad), tmp_path / "ws", provider)
    unpriced = _config(dataset, gpu="NVIDIA L4")
    with pytest.raises(CapExceeded, match="cannot price this job.*no SECURE on-demand price"):
        session.prepare(unpriced, tmp_path / "ws", provider)
    assert fake_runpod.creates == 0


def test_without_a_key_the_quote_is_the_dated_fallback_and_launch_refuses(provider, fake_runpod, dataset, tmp_path,
                                                                         monkeypatch):
    from stateset_plugins.providers import runpod

    monkeypatch.delenv("RUNPOD_API_KEY")
    plan = session.prepare(_config(dataset, gpu="a100"), tmp_path / "ws", provider)
    quote = plan["quote"]
    assert quote["live"] is False and quote["usd_per_gpu_hour"] == runpod.FALLBACK["SECURE"]["NVIDIA A100 80GB PCIe"]
    assert "dated fallback, not a live price" in quote["source"] and runpod.FALLBACK_AS_OF in quote["source"]
    assert "RUNPOD_API_KEY is not set" in quote["live_needs"]
    with pytest.raises(InputError, match="RUNPOD_API_KEY is not set"):
        session.launch(tmp_path / "ws", provider)
    assert fake_runpod.creates == 0
    with pytest.raises(InputError, match=r"not offered by runpod \(dated fallback table\)"):
        provider.quote({"gpu": "NVIDIA L4", "max_hours": 1})


def test_no_gpu_is_the_documented_default_and_says_so(provider):
    from stateset_plugins.providers import runpod

    q = provider.quote({"max_hours": 2, "storage_gb": 20})
    assert q["gpu"] == runpod.DEFAULT_GPU and q["live"] and q["usd_per_gpu_hour"] == 1.64
    assert "default" in q["gpu_default"] and "problem" in q["image"]
    assert "gpu_default" not in provider.quote({"gpu": "A40", "max_hours": 1})


def test_plan_edited_after_prepare_is_refused(provider, fake_runpod, dataset, tmp_path):
    ws = tmp_path / "ws"
    plan = session.prepare(_config(dataset), ws, provider)
    assert plan["run_id"].startswith("sa-") and plan["worst_case_usd"] == pytest.approx(2.99 * 2 + 20 * 0.1 * 2 / 730)
    assert (ws.stat().st_mode & 0o777) == 0o700
    edited = json.loads((ws / "plan.json").read_text())
    edited["max_hours"] = 20
    (ws / "plan.json").write_text(json.dumps(edited))
    with pytest.raises(InputError, match="edited after prepare"):
        session.launch(ws, provider)
    assert fake_runpod.creates == 0


def test_run_id_ignores_the_quote_and_new_run_salts_it(provider, dataset, tmp_path):
    a = session.prepare(_config(dataset), tmp_path / "a", provider)
    b = session.prepare(_config(dataset, max_cost_usd=50), tmp_path / "b", provider)
    c = session.prepare(_config(dataset, salt="again"), tmp_path / "c", provider)
    d = session.prepare(_config(dataset, max_hours=3, max_cost_usd=20), tmp_path / "d", provider)
    assert a["run_id"] == b["run_id"] and len({a["run_id"], c["run_id"], d["run_id"]}) == 3


def test_lost_response_then_retry_attaches_without_a_second_pod(provider, fake_runpod, dataset, tmp_path):
    ws = tmp_path / "ws"
    plan = session.prepare(_config(dataset), ws, provider)
    fake_runpod.lose_next_create_response = True
    with pytest.raises(Exception):
        session.launch(ws, provider)
    record = session.launch(ws, provider)  # the retry finds the pod by its run-id name
    again = session.launch(ws, provider)  # and so does a second invocation
    assert fake_runpod.creates == 1 and record["job"]["attached"] and again["job"]["attached"]
    pod = next(iter(fake_runpod.pods.values()))
    env = fake_runpod.env_of(pod["id"])
    assert pod["name"] == f"stateset-{plan['run_id']}" and env["STATESET_RUN_ID"] == plan["run_id"]
    assert float(env["STATESET_DEADLINE_AT"]) == pytest.approx(float(env["STATESET_CREATED_AT"]) + 2 * 3600)


class Clock:
    def __init__(self, fake, pod_id):
        self.t, self.fake, self.pod_id = 1_000_000.0, fake, pod_id

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.t += seconds
        if self.pod_id in self.fake.pods:
            self.fake.pods[self.pod_id]["uptimeSeconds"] += seconds


def test_watchdog_terminates_before_the_cap(provider, fake_runpod, dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("STATESET_RUNPOD_PROXY_URL", "http://127.0.0.1:9")  # worker unreachable: pod state rules
    ws = tmp_path / "ws"
    session.prepare(_config(dataset, max_cost_usd=6.5), ws, provider)
    record = session.launch(ws, provider, output=tmp_path / "out")
    pod_id = record["job"]["job_id"]
    fake_runpod.pods[pod_id]["uptimeSeconds"] = 1
    clock = Clock(fake_runpod, pod_id)
    # a deadline far away, so only the cap can stop it
    state.update_record(record["run_id"], job={**record["job"], "deadline_at": clock.t + 10 * 3600})
    done = session.watch(record["run_id"], provider, clock=clock, sleep=clock.sleep, poll_s=60)
    assert done["phase"] == "capped" and pod_id in fake_runpod.terminated
    assert done["spend_usd"] < 6.5 and done["spend_usd"] > 6.5 * 0.85
    ledger = state.read_ledger()
    assert ledger[-1]["outcome"] == "capped" and ledger[-1]["spend_usd"] == done["spend_usd"]


def test_pod_dying_mid_run_fails_the_run_and_books_the_spend(provider, fake_runpod, dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("STATESET_RUNPOD_PROXY_URL", "http://127.0.0.1:9")
    ws = tmp_path / "ws"
    session.prepare(_config(dataset), ws, provider)
    record = session.launch(ws, provider, output=tmp_path / "out")
    pod = fake_runpod.pods[record["job"]["job_id"]]
    pod.update(desiredStatus="EXITED", uptimeSeconds=1800)
    done = session.watch(record["run_id"], provider, clock=lambda: 0.0, sleep=lambda s: None)
    assert done["phase"] == "failed" and "exited" in done["error"]
    assert pod["id"] in fake_runpod.terminated  # an exited pod still bills its disk: it is terminated
    assert state.read_ledger()[-1]["spend_usd"] == pytest.approx(2.99 / 2)
    assert not (tmp_path / "out").exists()


def _pod_worker(fake, pod_id, tmp_path, *, corrupt=False):
    job = tmp_path / "pod-job"
    (job / "run" / "adapter").mkdir(parents=True)
    (job / "run" / "adapter" / "adapter_model.safetensors").write_bytes(b"weights" * 100)
    (job / "run" / "eval_results.json").write_text('{"totals": {}}')
    (job / "run" / "manifest.json").write_text('{"run_id": "x"}')
    receipt = receipt_for(job / "run", fake.env_of(pod_id)["STATESET_RUN_ID"], "succeeded", {"type": "completed"})
    if corrupt:
        receipt["files"][0]["sha256"] = "0" * 64
    (job / "receipt.json").write_text(json.dumps(receipt))
    (job / "status.json").write_text(json.dumps({"state": "succeeded"}))
    return serve_files(job, fake.env_of(pod_id)["STATESET_RUN_TOKEN"], 0, host="127.0.0.1")


@pytest.mark.parametrize("corrupt", [False, True])
def test_artifacts_come_back_checked_against_the_receipt(provider, fake_runpod, dataset, tmp_path, monkeypatch,
                                                         corrupt):
    ws, out = tmp_path / "ws", tmp_path / "runs" / "r1"
    session.prepare(_config(dataset), ws, provider)
    record = session.launch(ws, provider, output=out)
    server = _pod_worker(fake_runpod, record["job"]["job_id"], tmp_path, corrupt=corrupt)
    monkeypatch.setenv("STATESET_RUNPOD_PROXY_URL", f"http://127.0.0.1:{server.server_address[1]}")
    try:
        done = session.watch(record["run_id"], provider, clock=lambda: 0.0, sleep=lambda s: None)
    finally:
        server.shutdown()
    if corrupt:
        assert done["phase"] == "failed" and "does not match the receipt" in done["error"]
        assert not out.exists()
    else:
        assert done["phase"] == "collected"
        assert (out / "adapter" / "adapter_model.safetensors").read_bytes() == b"weights" * 100
        assert (out / "eval_results.json").exists() and (out / "manifest.json").exists()
        assert json.loads((out / "remote_receipt.json").read_text())["provider"] == "runpod"
    assert record["job"]["job_id"] in fake_runpod.terminated


def test_orphans_are_listed_and_cleaned(provider, fake_runpod, dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("STATESET_RUNPOD_PROXY_URL", "http://127.0.0.1:9")
    ws = tmp_path / "ws"
    session.prepare(_config(dataset), ws, provider)
    watched = session.launch(ws, provider)
    fake_runpod.pods["stray"] = {"id": "stray", "name": "stateset-sa-00000000000000000000", "desiredStatus": "RUNNING",
                                 "costPerHr": 2.0, "uptimeSeconds": 3600, "env": []}
    fake_runpod.pods["theirs"] = {"id": "theirs", "name": "someone-elses-pod", "desiredStatus": "RUNNING",
                                  "costPerHr": 1.0, "uptimeSeconds": 10, "env": []}
    found = session.orphans({"runpod": provider})
    assert [o["job_id"] for o in found] == ["stray"] and found[0]["why"] == "no local record"
    cleaned = session.clean_orphans({"runpod": provider})
    assert [c["job_id"] for c in cleaned] == ["stray"] and fake_runpod.terminated == ["stray"]
    assert state.read_ledger()[-1] == {**state.read_ledger()[-1], "kind": "orphan", "spend_usd": 2.0}
    assert watched["job"]["job_id"] in fake_runpod.pods and "theirs" in fake_runpod.pods
