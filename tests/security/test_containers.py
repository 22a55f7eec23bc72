"""Containers (core/runtimes/container.py): a real started plugin container, read back with `docker inspect`: not
privileged, every capability dropped, no privilege gain, read-only root filesystem, not the host's network, memory,
CPU and process limits, only the run's mounts (read-only unless the plugin writes there), and a non-root user
(`id -u` inside it). Skips without a Docker daemon or the `plugins` image, fails under CI (tests/containers)."""
from __future__ import annotations

import os

import pytest

from stateset_agents import GradeItem
from stateset_agents.core.runtimes import load_component
from stateset_agents.core.runtimes.container import ARTIFACTS, LABEL

pytestmark = pytest.mark.container


@pytest.fixture(scope="module")
def started(docker_client, plugins_image, tmp_path_factory):
    artifacts = tmp_path_factory.mktemp("artifacts")
    with load_component("reward:gsm8k", runtime="container", run_id="security-inspect",
                        artifacts_dir=str(artifacts)) as reward:
        (box,) = docker_client.containers.list(filters={"label": f"{LABEL}.run-id=security-inspect"})
        box.reload()
        yield box, artifacts, reward


def test_the_container_is_unprivileged_capless_and_cannot_gain_privileges(started):
    host = started[0].attrs["HostConfig"]
    assert host["Privileged"] is False
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert "no-new-privileges" in host["SecurityOpt"]


def test_the_root_filesystem_is_read_only_and_only_tmp_is_writable(started):
    box = started[0]
    assert box.attrs["HostConfig"]["ReadonlyRootfs"] is True
    assert set(box.attrs["HostConfig"]["Tmpfs"]) == {"/tmp"}
    code, out = box.exec_run(["sh", "-c", "touch /opt/x || echo refused; touch /tmp/x && echo tmp-ok"])
    assert b"refused" in out and b"tmp-ok" in out


def test_the_network_is_not_the_hosts_and_the_port_is_published_on_loopback_only(started):
    box = started[0]
    assert box.attrs["HostConfig"]["NetworkMode"] == "bridge"
    bound = [b["HostIp"] for ports in box.attrs["NetworkSettings"]["Ports"].values() for b in ports or []]
    assert bound and set(bound) == {"127.0.0.1"}


def test_memory_cpu_and_process_limits_are_set(started):
    host = started[0].attrs["HostConfig"]
    assert 0 < host["Memory"] <= 4 << 30 and host["MemorySwap"] == host["Memory"]  # a reward: 4 GiB, no swap
    assert 0 < host["NanoCpus"] <= 2e9
    assert 0 < host["PidsLimit"] <= 1024


def test_only_the_runs_mounts_are_there(started):
    box, artifacts, _ = started
    mounts = [(m["Source"], m["Destination"], m["RW"]) for m in box.attrs["Mounts"]]
    assert mounts == [(str(artifacts), ARTIFACTS, True)]  # no docker socket, no home, no host root


def test_the_plugin_runs_as_a_non_root_user(started):
    box, _, reward = started
    code, out = box.exec_run(["id", "-u"])
    uid = int(out.decode().strip())
    assert code == 0 and uid != 0
    assert uid == (os.getuid() or 10001)  # the invoking user, or the images' user under a root kernel
    conversation = {"id": "m", "messages": [{"role": "user", "content": "What is 6 times 7?"},
                                            {"role": "assistant", "content": "The answer is 42."}],
                    "metadata": {"reference_answer": "42"}}
    assert len(reward.grade([GradeItem(conversation)])) == 1  # and, so confined, it still grades
