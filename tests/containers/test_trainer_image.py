"""The `trainer` image, built for real: its CPU build (`images build trainer --cpu`: Dockerfile.gpu with the CPU
torch wheel, no vLLM, the GPU build's transformers range, then images/trainer/Dockerfile) on the local Debian base.

A trainer served from it handshakes, answers the image's health check, carries the kernel's labels, runs with no
GPU request, and trains the tiny random model for two updates with the reward inside the image, writing the run to
a host directory. Measured on the 2-core CI machine: image build 16-31 s warm (the kernel's layer only), about
80 s cold; these tests about 11 s. The GPU build itself (CUDA base, torch 2.14.0, vLLM 0.33) is not built here.

images/ci/prepare records the image in a records file of its own (conftest.TRAINER_RECORDS). Recorded in the
default records instead, it also serves every trainer and evaluator in the conformance suite: a deeper check, about
2.5 minutes longer, run by hand with `STATESET_AGENTS_IMAGES` unset after `images build trainer --cpu`.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from stateset_agents.core.runtimes import load_component
from stateset_agents.core.runtimes.container import IMAGES_ENV, LABEL

pytestmark = pytest.mark.container

ROWS = [{"prompt": [{"role": "user", "content": f"What is {a} plus {b}?"}],
         "completion": {"role": "assistant", "content": f"The answer is {a + b}."},
         "metadata": {"reference_answer": str(a + b)}} for a, b in [(2, 3), (4, 5), (1, 1), (6, 2)]]


def _ours(client, run_id):
    return client.containers.list(all=True, filters={"label": f"{LABEL}.run-id={run_id}"})


def test_the_trainer_image_carries_its_labels_and_its_stack(docker_client, trainer_image):
    labels = docker_client.images.get(trainer_image["id"]).labels
    assert labels["org.stateset.role"] == "trainer" and labels["org.stateset.device"] == "cpu"
    assert labels["org.stateset.contract-versions"] == "1"
    assert labels["org.stateset.version"] == trainer_image["version"]
    components = labels["org.stateset.components"].split(",")
    assert components == trainer_image["components"]
    # every objective, and the rewards inside, so a remote trainer scores without calling home
    assert {"trainer:grpo", "trainer:sft", "trainer:ppo", "reward:gsm8k", "reward:customer_support"} <= set(components)
    assert trainer_image["torch"] == "torch==2.13.0+cpu" and trainer_image["vllm"] is None
    base = docker_client.images.get(trainer_image["trainer_base"]).labels
    assert base["org.stateset.role"] == "trainer-base" and base["org.stateset.vllm"] == ""
    # the installed stack, asked of the image itself (no network)
    code = ("import json, sys, torch, transformers, peft; print(json.dumps({'python': sys.version_info[:2], "
            "'torch': torch.__version__, 'cuda': torch.version.cuda, 'transformers': transformers.__version__}))")
    out = docker_client.containers.run(trainer_image["id"], ["python3", "-c", code], entrypoint=[], remove=True,
                                       network_disabled=True)
    stack = json.loads(out.decode().strip().splitlines()[-1])
    assert stack["torch"] == "2.13.0+cpu" and stack["cuda"] is None
    major, minor = (int(x) for x in stack["transformers"].split(".")[:2])
    assert (5, 16) <= (major, minor) < (5, 21)  # vLLM 0.33's range, the one the GPU build installs


def test_a_trainer_in_its_image_is_healthy_and_trains_the_tiny_model(docker_client, trainer_image, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv(IMAGES_ENV, trainer_image["records_file"])  # the runtime picks the image from its record
    dataset = tmp_path / "curated.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    request = {"dataset": str(dataset), "reward": "gsm8k", "base_model": "tiny-random", "output": str(tmp_path / "run"),
               "steps": 2, "seed": 0,
               "config": {"num_generations": 2, "batch_size": 2, "max_new_tokens": 8, "learning_rate": 1e-3}}
    with load_component("trainer:grpo", runtime="container", artifacts_dir=tmp_path, run_id="run-trainer") as trainer:
        print(f"\ntrainer container start-to-handshake: {trainer.start_seconds:.2f}s")
        assert 1 in trainer.contract_versions
        (box,) = _ours(docker_client, "run-trainer")
        assert box.image.id == trainer_image["id"]
        # the invoking user; never root (a root kernel runs it as the images' user, SECURITY.md)
        assert box.attrs["Config"]["User"] == (f"{os.getuid()}:{os.getgid()}" if os.getuid() else "10001:0")
        assert box.labels["org.stateset.component"] == "trainer:grpo"
        assert not box.attrs["HostConfig"].get("DeviceRequests")  # a CPU build: no GPU asked for
        assert {m["Destination"] for m in box.attrs["Mounts"]} == {"/artifacts"}
        started = time.monotonic()
        events = list(trainer.run(request))
        print(f"two GRPO updates of tiny-random in the container: {time.monotonic() - started:.1f}s")
        assert events[-1]["type"] == "completed", events[-1]
        assert [e["step"] for e in events if e["type"] == "metrics"] == [1, 2]
        # paths in events come back as host paths
        (checkpoint,) = [e for e in events if e["type"] == "checkpoint"]
        assert checkpoint["path"].startswith(str(tmp_path / "run"))
        assert _ours(docker_client, "run-trainer") == [box]  # the artifact mount covered every path: no restart
        # the image's HEALTHCHECK speaks grpc.health.v1 without the token
        deadline = time.monotonic() + 40
        while box.attrs["State"].get("Health", {}).get("Status") != "healthy" and time.monotonic() < deadline:
            time.sleep(0.5)
            box.reload()
        assert box.attrs["State"]["Health"]["Status"] == "healthy"
    assert not _ours(docker_client, "run-trainer")
    run = tmp_path / "run"
    assert (run / "adapter" / "adapter_model.safetensors").is_file()
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["committed_updates"] == 2
    # it ran in the image: the image's stack (transformers below 5.21, Debian's Python), whatever this machine has
    software = manifest["software"]
    assert software["torch"] == "2.13.0+cpu" and software["python"].startswith("3.11.")
    assert tuple(int(x) for x in software["transformers"].split(".")[:2]) < (5, 21)
