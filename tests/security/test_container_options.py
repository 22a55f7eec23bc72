"""The container confinement as the kernel asks for it (ContainerLaunch.options), checked without a daemon, so it
runs on every machine: test_containers.py proves the daemon applies it."""
from __future__ import annotations

import os

import pytest

from stateset_agents.core.errors import InputError
from stateset_agents.core.registry import get_registry
from stateset_agents.core.runtimes import container as rt


@pytest.fixture()
def launch(tmp_path, monkeypatch):
    def make(name: str):
        monkeypatch.setenv(rt.IMAGES_ENV, str(tmp_path / "images.json"))
        rt.record_image("plugins", {"id": "sha256:abc", "tag": "t", "components": [name]})
        return rt.ContainerLaunch(get_registry().resolve(name), {}, artifacts_dir=tmp_path / "art", run_id="r")
    (tmp_path / "art").mkdir()
    return make


def test_the_options_drop_capabilities_lock_the_root_and_never_ask_for_root(launch):
    opts = launch("reward:gsm8k").options("tok")
    assert opts["privileged"] is False and opts["cap_drop"] == ["ALL"] and "cap_add" not in opts
    assert opts["security_opt"] == ["no-new-privileges"] and opts["network_mode"] == "bridge"
    assert opts["read_only"] is True and set(opts["tmpfs"]) == {"/tmp"}
    assert not opts["user"].startswith("0:") and opts["user"] != "0"
    assert opts["mem_limit"] == opts["memswap_limit"] <= 4 << 30 and opts["nano_cpus"] <= 2e9
    assert opts["pids_limit"] == 1024


def test_limits_are_overridable_and_a_bad_one_is_refused_naming_the_variable(launch, monkeypatch):
    monkeypatch.setenv("STATESET_CONTAINER_MEMORY", str(1 << 30))
    monkeypatch.setenv("STATESET_CONTAINER_CPUS", "0.5")
    monkeypatch.setenv("STATESET_CONTAINER_PIDS", "64")
    opts = launch("reward:gsm8k").options("tok")
    assert (opts["mem_limit"], opts["nano_cpus"], opts["pids_limit"]) == (1 << 30, 500_000_000, 64)
    monkeypatch.setenv("STATESET_CONTAINER_PIDS", "lots")
    with pytest.raises(InputError, match="STATESET_CONTAINER_PIDS"):
        launch("reward:gsm8k").options("tok")


def test_a_root_kernel_runs_the_plugin_as_the_images_user_with_its_mount_group_writable(launch, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.setattr(rt.os, "getuid", lambda: 0)
    monkeypatch.setattr(rt.os, "chmod", lambda path, mode: chmods.append((str(path), mode)))
    chmods: list = []
    opts = launch("reward:gsm8k").options("tok")
    assert opts["user"] == f"{rt.IMAGE_UID}:0"
    st = os.stat(tmp_path / "art")
    # only a root-group directory that is not world-writable is changed, and only by adding the group's rwx
    changed = st.st_gid == 0 and not st.st_mode & 0o002
    expected = [(str(tmp_path / "art"), (st.st_mode & 0o7777) | 0o070)] if changed else []
    assert chmods == expected
