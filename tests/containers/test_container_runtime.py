"""The container runtime against a real Docker daemon and the built `plugins` image: the same answers as the
other runtimes, every fault fails closed, and no container outlives its kernel."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stateset_agents import GradeItem, Source
from stateset_agents.cli import main
from stateset_agents.core.errors import ContractMismatch, PluginError, StatesetError
from stateset_agents.core.runtimes import load_component
from stateset_agents.core.runtimes.container import LABEL, reap_orphans

pytestmark = pytest.mark.container

SAMPLES = Path(__file__).resolve().parents[2] / "kernel" / "stateset_agents" / "samples"
CONV = {"id": "m", "messages": [{"role": "user", "content": "What is 6 times 7?"},
                                {"role": "assistant", "content": "6 x 7 = 42. The answer is 42."}],
        "metadata": {"reference_answer": "42"}}
FAKE_HANDSHAKE = json.dumps({"protocol": "stateset-plugin", "contract_versions": [99], "transport": "grpc",
                             "address": "127.0.0.1:50051"})


def _ours(client, **labels):
    wanted = [f"{LABEL}.{k}={v}" for k, v in labels.items()]
    return client.containers.list(all=True, filters={"label": wanted})


def _gone_within(client, seconds: float, **labels) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _ours(client, **labels):
            return True
        time.sleep(0.2)
    return False


def test_a_reward_in_a_container_grades_like_in_process_and_is_removed_after(docker_client, plugins_image):
    with load_component("reward:gsm8k", kind="reward") as local:
        expected = local.grade([GradeItem(CONV)])
    with load_component("reward:gsm8k", runtime="container", run_id="run-grade") as reward:
        print(f"\ncontainer start-to-handshake: {reward.start_seconds:.2f}s")
        assert reward.grade([GradeItem(CONV)]) == expected
        assert [row for batch in reward.grade_many([[GradeItem(CONV)]] * 3) for row in batch] == expected * 3
        (box,) = _ours(docker_client, **{"run-id": "run-grade"})
        # the invoking user; never root (a root kernel runs it as the images' user, SECURITY.md)
        assert box.attrs["Config"]["User"] == (f"{os.getuid()}:{os.getgid()}" if os.getuid() else "10001:0")
        assert box.labels["org.stateset.component"] == "reward:gsm8k"
        # The image's HEALTHCHECK speaks grpc.health.v1 without the token.
        deadline = time.monotonic() + 30
        while box.attrs["State"].get("Health", {}).get("Status") != "healthy" and time.monotonic() < deadline:
            time.sleep(0.5)
            box.reload()
        assert box.attrs["State"]["Health"]["Status"] == "healthy"
    assert not _ours(docker_client, **{"run-id": "run-grade"})


def test_the_image_carries_its_labels(docker_client, plugins_image):
    labels = docker_client.images.get(plugins_image["id"]).labels
    assert labels["org.stateset.role"] == "plugins" and labels["org.stateset.contract-versions"] == "1"
    assert labels["org.stateset.version"] == plugins_image["version"]
    assert "reward:gsm8k" in labels["org.stateset.components"].split(",")


def test_an_image_speaking_another_contract_version_is_refused_at_handshake(docker_client, plugins_image):
    argv = ["python3", "-c", f"print({FAKE_HANDSHAKE!r}, flush=True); import time; time.sleep(60)"]
    with pytest.raises(ContractMismatch, match=r"speaks contract versions \[99\], this kernel speaks \[1\]"):
        load_component("reward:gsm8k", runtime="container", argv=argv, run_id="run-contract")
    assert _gone_within(docker_client, 10, **{"run-id": "run-contract"})


def test_a_container_that_exits_before_its_handshake_fails_clearly(docker_client, plugins_image):
    argv = ["python3", "-c", "import sys; print('cannot start: no model', file=sys.stderr); sys.exit(3)"]
    with pytest.raises(PluginError, match=r"(?s)exited with code 3 before its handshake.*cannot start: no model"):
        load_component("reward:gsm8k", runtime="container", argv=argv, run_id="run-exit")
    assert _gone_within(docker_client, 10, **{"run-id": "run-exit"})


def test_a_container_that_hangs_past_its_deadline_fails_clearly(docker_client, plugins_image):
    with pytest.raises(PluginError, match=r"no handshake line within 2s"):
        load_component("reward:gsm8k", runtime="container", argv=["sleep", "600"], handshake_timeout=2,
                       run_id="run-hang")
    assert _gone_within(docker_client, 10, **{"run-id": "run-hang"})


def test_a_container_killed_mid_run_fails_the_call(docker_client, plugins_image):
    with load_component("reward:gsm8k", runtime="container", run_id="run-killed") as reward:
        _ours(docker_client, **{"run-id": "run-killed"})[0].kill()
        with pytest.raises(PluginError, match=r"reward:gsm8k failed in Reward.Grade: .*exited with code"):
            reward.grade([GradeItem(CONV)])


KERNEL = textwrap.dedent("""
    import sys, time
    from stateset_agents.core.runtimes import load_component
    with load_component("reward:gsm8k", runtime="container", run_id=sys.argv[1]):
        print("up", flush=True)
        time.sleep(120)
""")


def _kernel(run_id: str) -> subprocess.Popen:
    # Ctrl-C prints a traceback there. SIGINT back to its default first: a suite started in the background by a
    # shell without job control inherits it ignored, and Python then never turns it into KeyboardInterrupt.
    proc = subprocess.Popen([sys.executable, "-c", KERNEL, run_id], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().strip() == "up"
    return proc


def test_ctrl_c_stops_and_removes_the_container(docker_client, plugins_image):
    proc = _kernel("run-sigint")
    assert len(_ours(docker_client, **{"run-id": "run-sigint"})) == 1
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)  # the container's removal under a loaded machine takes more than the idle few seconds
    assert _gone_within(docker_client, 10, **{"run-id": "run-sigint"})


def test_a_crashed_kernel_leaves_an_orphan_that_exits_and_is_reaped(docker_client, plugins_image):
    proc = _kernel("run-crash")
    proc.kill()  # no cleanup code runs
    proc.wait(timeout=10)
    (box,) = _ours(docker_client, **{"run-id": "run-crash"})
    deadline = time.monotonic() + 15
    while box.status != "exited" and time.monotonic() < deadline:  # the daemon closed its stdin: it exits
        time.sleep(0.2)
        box.reload()
    assert box.status == "exited"
    assert box.name in reap_orphans(docker_client)
    assert not _ours(docker_client, **{"run-id": "run-crash"})


def test_an_ingestor_reads_host_files_through_a_mount(docker_client, plugins_image, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.jsonl").write_bytes((SAMPLES / "support_logs.jsonl").read_bytes()[:20000].rsplit(b"\n", 1)[0] + b"\n")
    source = Source(path="logs/a.jsonl", sha256="0" * 64, local_path=str(logs / "a.jsonl"))
    with load_component("ingestor:openai") as local:
        expected = list(local.ingest(source))
    with load_component("ingestor:openai", runtime="container", run_id="run-ingest") as ingestor:
        assert list(ingestor.ingest(source)) == expected
        (box,) = _ours(docker_client, **{"run-id": "run-ingest"})
        assert {m["Destination"]: m["RW"] for m in box.attrs["Mounts"]} == {"/mnt/host/0": False}


def test_improve_run_writes_the_same_bytes_in_every_runtime(docker_client, plugins_image, tmp_path, capsys):
    outputs = {}
    for runtime in ("inprocess", "subprocess", "container"):
        ingested = tmp_path / f"ingested-{runtime}"
        assert main(["ingest", "--format", "openai", "--input", str(SAMPLES / "support_logs.jsonl"), "--output",
                     str(ingested), "--runtime", runtime]) == 0
        out = tmp_path / f"improve-{runtime}"
        started = time.monotonic()
        assert main(["improve", "run", "--transcripts", str(ingested), "--reward", "customer_support",
                     "--output", str(out), "--runtime", runtime]) == 0
        print(f"improve run --runtime {runtime}: {time.monotonic() - started:.2f}s", file=sys.stderr)
        outputs[runtime] = ((ingested / "transcripts.jsonl").read_bytes(), (out / "graded.jsonl").read_bytes())
    capsys.readouterr()
    assert outputs["inprocess"][1]  # something was graded
    assert outputs["subprocess"] == outputs["inprocess"]
    assert outputs["container"] == outputs["inprocess"]


def test_a_trainer_asks_for_gpus_and_a_daemon_without_them_says_so(docker_client, plugins_image):
    if any(rt for rt in docker_client.info().get("Runtimes", {}) if "nvidia" in rt):
        pytest.skip("this daemon has the NVIDIA runtime")
    with pytest.raises(StatesetError, match=r"trainer:\w+'s container asks for GPUs .*NVIDIA Container Toolkit"):
        load_component("trainer:grpo", runtime="container", image=plugins_image["id"], run_id="run-gpu")
    assert _gone_within(docker_client, 10, **{"run-id": "run-gpu"})
