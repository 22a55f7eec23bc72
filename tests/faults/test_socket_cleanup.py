"""A subprocess plugin's private socket directory is removed when the kernel is done with the plugin, also when the
plugin was killed and could not remove it itself (killed plugins used to leave one 0700 directory each in /tmp)."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from stateset_agents.core.runtimes import load_component


def _socket_dir(proxy) -> Path:
    address = proxy.conn.address
    assert address.startswith("unix://")
    return Path(address[len("unix://"):]).parent


@pytest.mark.parametrize("ending", ["normal", "killed"])
def test_the_socket_directory_is_gone_after_the_plugin(ending):
    with load_component("reward:test_length", config={"target": 30}, runtime="subprocess") as reward:
        directory = _socket_dir(reward)
        assert directory.is_dir() and (directory.stat().st_mode & 0o777) == 0o700
        if ending == "killed":
            os.kill(reward.conn.process.pid, signal.SIGKILL)
            reward.conn.process.wait(timeout=10)
            assert directory.is_dir()  # the server could not clean up after itself
    assert not directory.exists()
