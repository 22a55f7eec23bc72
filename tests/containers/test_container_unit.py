"""The container runtime's pieces that need no Docker daemon: path mapping, container settings, image records,
orphan detection, and the error when no daemon answers."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stateset_agents.core.errors import StatesetError
from stateset_agents.core.registry import get_registry
from stateset_agents.core.runtimes import container as rt
from stateset_agents.core.runtimes import available_runtimes, load_component


@pytest.fixture
def records(tmp_path, monkeypatch):
    monkeypatch.setenv(rt.IMAGES_ENV, str(tmp_path / "images.json"))
    return tmp_path / "images.json"


def test_importing_the_kernel_and_the_runtime_never_imports_docker():
    code = ("import sys, stateset_agents, stateset_agents.core.runtimes.container, stateset_agents.cli.images_cmd; "
            "print('docker' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_path_map_translates_both_ways_and_prefers_the_deepest_mount(tmp_path):
    art, inner = tmp_path / "run", tmp_path / "run" / "inputs"
    inner.mkdir(parents=True)
    paths = rt.PathMap.for_run(art, [str(inner)])
    assert paths.to_container(str(art / "graded.jsonl")) == "/artifacts/graded.jsonl"
    assert paths.to_container(str(inner / "a.jsonl")) == "/mnt/host/0/a.jsonl"
    assert paths.to_container(str(tmp_path / "runner")) is None  # a sibling with a common prefix is not inside
    assert paths.to_container(str(inner / "a.jsonl"), writable=True) is None  # read-only mount
    assert paths.to_host("/artifacts/adapter/x.safetensors") == str(art / "adapter" / "x.safetensors")
    assert paths.to_host("/mnt/host/0/a.jsonl") == str(inner / "a.jsonl")
    assert paths.to_host("/elsewhere") == "/elsewhere"
    assert paths.volumes() == {str(inner): {"bind": "/mnt/host/0", "mode": "ro"},
                               str(art): {"bind": "/artifacts", "mode": "rw"}}


def test_request_paths_are_found_and_missing_ones_mounted_at_their_nearest_directory(tmp_path):
    (tmp_path / "data").mkdir()
    request = {"dataset": str(tmp_path / "data" / "curated.jsonl"), "output_dir": str(tmp_path / "runs" / "x" / "y"),
               "base_model": "HuggingFaceTB/SmolLM2-135M", "steps": 3, "nested": [str(tmp_path / "data")]}
    found = rt.host_paths(request)
    assert str(tmp_path / "data" / "curated.jsonl") in found and str(tmp_path / "data") in found
    assert not any(p.startswith("HuggingFace") for p in found)
    assert str(tmp_path / "runs" / "x" / "y") not in found  # neither it nor its parent exists yet
    paths = rt.PathMap.for_run(None)
    assert paths.missing(found) == [str(tmp_path / "data")]
    mounted = paths.with_dirs(paths.missing(found), "rw")
    mapped = mounted.map(request, lambda s: (mounted.to_container(s) or s) if s.startswith("/") else s)
    assert mapped["dataset"] == "/mnt/host/0/curated.jsonl" and mapped["steps"] == 3


def _spec(full_name):
    return get_registry().resolve(full_name)


def test_container_settings(records, tmp_path):
    rt.record_image("plugins", {"id": "sha256:abc", "tag": "t", "components": ["reward:gsm8k"]})
    launch = rt.ContainerLaunch(_spec("reward:gsm8k"), {}, artifacts_dir=tmp_path, run_id="run-42")
    opts = launch.options("tok")
    assert opts["image"] == "sha256:abc"
    assert opts["environment"] == {"STATESET_PLUGIN_TOKEN": "tok", "HOME": "/tmp"}  # no host pid: other namespace
    assert opts["user"] == (f"{os.getuid()}:{os.getgid()}" if os.getuid() else "10001:0")  # never root
    assert opts["ports"] == {"50051/tcp": ("127.0.0.1", None)}  # loopback only, a free host port
    assert opts["volumes"] == {str(tmp_path): {"bind": "/artifacts", "mode": "rw"}}
    assert opts["labels"]["org.stateset.run-id"] == "run-42"
    assert opts["labels"]["org.stateset.kernel-pid"] == str(os.getpid())
    assert opts["command"] == ["reward:gsm8k"] and opts["stdin_open"] and "device_requests" not in opts


def test_trainers_request_gpus(records):
    pytest.importorskip("docker")
    spec = next(s for s in get_registry().all("trainer"))
    opts = rt.ContainerLaunch(spec, {}, image="img").options("tok")
    (request,) = opts["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert "device_requests" not in rt.ContainerLaunch(spec, {}, image="img", gpus=0).options("tok")


def test_a_trainer_from_a_cpu_build_asks_for_no_gpu(records):
    pytest.importorskip("docker")
    spec = _spec("trainer:grpo")
    rt.record_image("trainer", {"id": "sha256:cpu", "components": ["trainer:grpo"], "device": "cpu"})
    launch = rt.ContainerLaunch(spec, {})
    assert launch.image == "sha256:cpu" and launch.gpus == 0 and "device_requests" not in launch.options("tok")
    rt.record_image("trainer", {"id": "sha256:gpu", "components": ["trainer:grpo"], "device": "cuda"})
    assert rt.ContainerLaunch(spec, {}).options("tok")["device_requests"][0]["Count"] == -1
    rt.record_image("trainer", {"id": "sha256:old", "components": ["trainer:grpo"]})  # a record from before
    assert rt.ContainerLaunch(spec, {}).gpus == -1


def test_the_trainer_stacks_pin_what_vllm_0_33_requires():
    from stateset_agents.cli.images_cmd import trainer_stack

    gpu = trainer_stack(cpu=False)
    assert gpu == {"TORCH": "torch==2.14.0", "VLLM": "vllm==0.33.*", "TRANSFORMERS": "transformers>=5.16.1,<5.21",
                   "TORCH_INDEX_URL": "", "OFFLINE": "0"}
    cpu = trainer_stack(cpu=True)
    assert cpu["TORCH"] == "torch==2.13.0+cpu" and cpu["VLLM"] == "" and cpu["OFFLINE"] == "1"
    assert cpu["TRANSFORMERS"] == gpu["TRANSFORMERS"]  # the CPU test build tests the GPU build's transformers
    assert trainer_stack(cpu=True, torch="2.13.0", torch_index="https://x/cpu")["TORCH"] == "torch==2.13.0"
    assert trainer_stack(cpu=True, torch_index="https://x/cpu")["TORCH_INDEX_URL"] == "https://x/cpu"


def test_records_pick_the_image_holding_a_component(records):
    assert rt.image_for(_spec("reward:gsm8k")) is None
    with pytest.raises(StatesetError, match="no built image holds reward:gsm8k.*images build plugins"):
        rt.ContainerLaunch(_spec("reward:gsm8k"), {})
    rt.record_image("plugins", {"id": "sha256:abc", "components": ["reward:gsm8k", "ingestor:openai"]})
    rt.record_image("trainer", {"id": "sha256:def", "components": ["trainer:grpo"]})
    assert rt.image_for(_spec("reward:gsm8k"))[0] == "plugins"
    assert json.loads(records.read_text())["images"]["trainer"]["id"] == "sha256:def"
    records.write_text("{not json")
    with pytest.raises(StatesetError, match="not JSON"):
        rt.read_images()


def test_plugins_list_shows_the_image_of_each_component(records, capsys):
    from stateset_agents.cli import main

    rt.record_image("plugins", {"id": "sha256:abc", "tag": "stateset-agents-plugins:x", "components": ["reward:gsm8k"]})
    assert main(["plugins", "list", "--json"]) == 0
    rows = {r["component"]: r for r in json.loads(capsys.readouterr().out)["components"]}
    assert rows["reward:gsm8k"]["image"] == "stateset-agents-plugins:x"
    assert rows["ingestor:openai"]["image"] is None


def test_orphans_are_containers_whose_kernel_is_gone():
    me = {"org.stateset.kernel-pid": str(os.getpid()), "org.stateset.kernel-start": rt._start_ticks(os.getpid())}
    assert rt._kernel_alive(me)
    assert not rt._kernel_alive({**me, "org.stateset.kernel-start": "1"})  # the pid was reused
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not rt._kernel_alive({"org.stateset.kernel-pid": str(dead.pid)})
    assert not rt._kernel_alive({})

    class Box:
        def __init__(self, name, labels):
            self.name, self.labels, self.removed = name, labels, False

        def remove(self, force):
            self.removed = force

    boxes = [Box("live", me), Box("orphan", {"org.stateset.kernel-pid": str(dead.pid)})]

    class Client:
        class containers:
            @staticmethod
            def list(all, filters):
                assert all and filters["label"].startswith("org.stateset.kernel-host=")
                return boxes

    assert rt.reap_orphans(Client()) == ["orphan"] and not boxes[0].removed


def test_docker_log_frames_are_split_into_lines():
    assert list(rt._lines([b"hand", b"shake\nerr", b"or 1\nerror 2\n", b"tail"])) == \
        [b"handshake", b"error 1", b"error 2", b"tail"]


def test_no_daemon_says_so_and_how_to_start_one_while_other_runtimes_work(monkeypatch, tmp_path):
    pytest.importorskip("docker")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    monkeypatch.setattr(rt, "_client", None)
    with pytest.raises(StatesetError, match=r"needs a Docker daemon.*systemctl start docker.*dockerd"):
        load_component("reward:gsm8k", runtime="container")
    assert available_runtimes() == ("inprocess", "subprocess")
    with load_component("reward:gsm8k", runtime="subprocess") as reward:
        assert reward.name == "gsm8k"


def test_an_unknown_runtime_names_the_choices():
    with pytest.raises(StatesetError, match="inprocess, subprocess, container"):
        load_component("reward:gsm8k", runtime="kubernetes")


def test_the_gpu_trainer_build_context_and_arguments(records, monkeypatch):
    """`images build trainer` (the GPU build, never built here) with a stand-in daemon: what Dockerfile.gpu and the
    role's Dockerfile receive."""
    from pathlib import Path
    from types import SimpleNamespace

    from stateset_agents.cli import images_cmd

    builds = []

    def build(client, *, log, **kwargs):
        ctx = kwargs.get("path")
        files = [str(p.relative_to(ctx)) for p in Path(ctx).rglob("*")] if ctx else []
        reqs = {name: (Path(ctx) / name).read_text()
                for name in ("deps/requirements.txt", "wheels/requirements.txt") if name in files}
        builds.append({"files": files, "reqs": reqs, **{k: v for k, v in kwargs.items() if k != "fileobj"}})
        return f"sha256:{len(builds)}"

    client = SimpleNamespace(images=SimpleNamespace(get=lambda _id: SimpleNamespace(attrs={"Size": 7})))
    monkeypatch.setattr(rt, "docker_client", lambda: client)
    monkeypatch.setattr(images_cmd, "_docker_build", build)
    monkeypatch.setattr(images_cmd, "_components", lambda _c, _img, _role: ["reward:gsm8k", "trainer:grpo"])
    record = images_cmd.build_image("trainer")
    base, role, relabel = builds
    assert base["buildargs"] == {"BASE_IMAGE": "nvidia/cuda:13.0.0-base-ubuntu24.04", "VERSION": record["version"],
                                 "TORCH": "torch==2.14.0", "VLLM": "vllm==0.33.*",
                                 "TRANSFORMERS": "transformers>=5.16.1,<5.21", "TORCH_INDEX_URL": "",
                                 "OFFLINE": "0"}
    wheel = next(f for f in base["files"] if f.startswith("wheels/stateset_agents-"))
    assert sorted(base["files"]) == sorted(["Dockerfile", "deps", "deps/requirements.txt", "wheels", wheel,
                                            "wheels/requirements.txt"])
    assert base["reqs"]["deps/requirements.txt"] == ""  # the GPU stack comes from the index inside the build
    assert role["buildargs"]["BASE_IMAGE"] == "sha256:1" and role["buildargs"]["DEVICE"] == "cuda"
    assert role["buildargs"]["OFFLINE"] == "0" and role["reqs"]["wheels/requirements.txt"] == ""
    assert relabel["labels"] == {"org.stateset.components": "reward:gsm8k,trainer:grpo"}
    assert record["device"] == "cuda" and record["vllm"] == "vllm==0.33.*"
    assert record["tag"] == f"stateset-agents-trainer:{record['version']}"
    assert json.loads(records.read_text())["images"]["trainer"]["id"] == "sha256:3"
    with pytest.raises(StatesetError, match="--cpu needs --base"):
        images_cmd.build_image("trainer", cpu=True)
    with pytest.raises(StatesetError, match="the plugins role has none"):
        images_cmd.build_image("plugins", cpu=True)
