"""The installed `stateset-agents studio` in a real terminal (tmux), driven as a user drives it: pick the dataset,
review the plan, launch, watch it to the end, quit. The run is a real local job of the tiny model."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stateset_agents.remote import state

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/system-deps)")
STEPS = 3


def test_the_installed_command_under_tmux(workspace, tiny_config, tmp_path):
    pytest.importorskip("torch")
    config = json.loads(tiny_config.read_text())
    config["training"].update(steps=STEPS, save_every=1)
    tiny_config.write_text(json.dumps(config))
    command = Path(sys.prefix) / "bin" / "stateset-agents"
    assert command.is_file()
    socket = f"studio-test-{tmp_path.name}"
    tmux = ["tmux", "-L", socket]

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "studio"], capture_output=True, text=True).stdout

    def wait_for(pattern: str, timeout: float = 120.0) -> re.Match:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            # the screen wraps long lines at any space, so whitespace runs are compared as one space
            found = re.search(pattern, re.sub(r"\s+", " ", screen()))
            if found:
                return found
            time.sleep(0.3)
        raise AssertionError(f"{pattern!r} never appeared; the screen:\n{screen()}")

    def keys(*names: str) -> None:
        subprocess.run([*tmux, "send-keys", "-t", "studio", *names], check=True)

    # a private tmux server, started from this process: it runs the command with this test's environment
    subprocess.run([*tmux, "new-session", "-d", "-s", "studio", "-x", "100", "-y", "32",
                    f"{command} studio {workspace}"], check=True)
    try:
        wait_for(r"Curated datasets in the workspace")
        keys("Enter")  # the highlighted dataset: the improve folder
        wait_for(r"Configure")
        wait_for(r"improve/curated\.jsonl \(validation improve/validation\.jsonl\)")
        keys("C-r")
        run_id = wait_for(r"plan (sa-[0-9a-f]+)", timeout=180).group(1)
        wait_for(r"within the cap")
        keys("C-l")
        wait_for(rf"{run_id}: collected · {STEPS} of {STEPS} committed updates · validation: improved \d+, "
                 r"regressed \d+", timeout=300)
        keys("C-q")
        end = time.monotonic() + 20
        while time.monotonic() < end and subprocess.run([*tmux, "has-session", "-t", "studio"],
                                                        capture_output=True).returncode == 0:
            time.sleep(0.2)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
    record = state.load_record(run_id)
    assert record["phase"] == "collected" and Path(record["output"]) == workspace / "studio" / "runs" / run_id
    manifest = json.loads((workspace / "studio" / "runs" / run_id / "manifest.json").read_text())
    assert manifest["committed_updates"] == STEPS and manifest["algorithm"] == "grpo"
