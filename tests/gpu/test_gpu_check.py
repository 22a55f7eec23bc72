"""`scripts/gpu-check --cpu-dry-run` end to end: the wheel install, the tiny bf16 GRPO run, the JSON it writes."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_dry_run_installs_the_wheel_runs_and_writes_its_figures(tmp_path):
    pytest.importorskip("setuptools", minversion="77")  # builds this project's wheel (PEP 639 license string)
    wheels = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "-w", str(wheels), str(ROOT)], check=True, timeout=120)
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(ROOT / "scripts" / "gpu-check"), "--cpu-dry-run", "--wheels", str(wheels),
                           "--out", str(out)], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "gpu-check: cpu-dry-run done" in done.stdout
    result = json.loads(out.read_text())
    assert result["mode"] == "cpu-dry-run" and result["device"] == "cpu" and result["dtype"] == "bfloat16"
    # the code ran from the wheel it installed, not from this checkout
    assert "site" in Path(result["project_from"]).parts and not result["project_from"].startswith(str(ROOT))
    assert result["run"]["steps"] == len(result["step_time_s"]) == len(result["reward_mean"]) == 2
    assert all(t > 0 for t in result["step_time_s"])
    for key in ("generation_tokens_per_s", "train_tokens_per_s", "step_time_s_mean_after_first"):
        assert result[key] > 0 and math.isfinite(result[key])
    assert result["peak_gpu_memory_bytes"] is None  # no CUDA here
    for key in ("logprob_agreement_bf16_vs_fp32_cpu", "logprob_agreement_sampling_vs_recomputed"):
        agreement = result[key]
        assert agreement["tokens"] > 0
        assert 0 <= agreement["mean_abs_diff"] <= agreement["max_abs_diff"] < 0.5
    assert result["model"]["vocab_size"] == result["model"]["tokenizer_size"] == 512


def test_the_gpu_mode_refuses_to_start_without_wheels(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run([str(ROOT / "scripts" / "gpu-check"), "--wheels", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--prepare" in done.stderr
