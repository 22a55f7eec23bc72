"""Kill -9 mid-run and resume: the same adapter bytes as an uninterrupted run. SIGTERM: finish, save, explain."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = "tests.helpers.run_toy"  # run with -m: the repo root is on PYTHONPATH (tests/conftest.py)
STEPS = 5


def launch(model_dir, out, *extra, sleep="0.02"):
    env = {**os.environ, "TOY_REWARD_SLEEP": sleep, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, "-m", SCRIPT, str(model_dir), str(out), str(STEPS), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for(path: Path, proc, timeout=90.0):
    deadline = time.time() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"the run ended before {path.name} appeared: {proc.stderr.read()[-2000:]}")
        if time.time() > deadline:
            proc.kill()
            pytest.fail(f"{path} did not appear")
        time.sleep(0.05)


def adapter_bytes(run: Path) -> bytes:
    return (run / "adapter" / "adapter_model.safetensors").read_bytes()


def test_sigkill_then_resume_gives_the_same_adapter_bytes(tiny_model_dir, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    full = launch(tiny_model_dir, tmp_path / "a" / "run", sleep="0")
    killed = launch(tiny_model_dir, tmp_path / "b" / "run", sleep="0.3")  # slow grading: time to kill mid-run
    wait_for(tmp_path / "b" / "run" / "checkpoints" / "step-000002" / "state.json", killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert full.wait(timeout=120) == 0, full.stderr.read()[-2000:]
    assert not (tmp_path / "b" / "run" / "adapter").exists()
    resumed = launch(tiny_model_dir, tmp_path / "b" / "run", "--resume", sleep="0")
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err[-2000:]
    first = json.loads(out.splitlines()[1])
    assert "from step" in first.get("message", "") and "from step 0" not in first["message"]
    assert adapter_bytes(tmp_path / "a" / "run") == adapter_bytes(tmp_path / "b" / "run")


def test_sigterm_finishes_the_update_saves_and_says_how_to_resume(tiny_model_dir, tmp_path):
    proc = launch(tiny_model_dir, tmp_path / "run", sleep="0.3")
    wait_for(tmp_path / "run" / "checkpoints" / "step-000001" / "state.json", proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    last = json.loads(out.splitlines()[-1])
    assert last["type"] == "failed" and last["reason"] == "interrupted" and "--resume" in last["message"]
    saved = int(sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[-1].name.split("-")[1])
    assert saved == last["step"] >= 1
