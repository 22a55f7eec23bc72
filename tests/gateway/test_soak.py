"""The gateway soak (benchmarks/soak_gateway.py) for 60 seconds on the tiny model: a real `serve` child with a key
and capture, bench_gateway's load of 8 streaming clients, no request failing and the server's RSS flat after the
warm-up (by the soak's own stated threshold)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openai")
ROOT = Path(__file__).resolve().parents[2]


def test_a_minute_of_load_has_no_errors_and_flat_rss(tiny_model_dir, tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak_gateway.py"), "--minutes", "1",
                          "--base-model", str(tiny_model_dir), "--max-tokens", "16", "--warmup-s", "15",
                          "--output", str(out)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    result = json.loads(out.read_text())
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert result["errors"] == 0 and result["server_alive"] and result["requests"] >= 50, result["failures"]
    assert result["flat"] and result["growth_after_warmup_mib"] <= result["max_growth_mib"]
    assert result["seconds"] >= 60 and result["samples"] >= 50
    assert "RSS start" in run.stdout and "slope" in run.stdout and "FLAT" in run.stdout
