"""benchmarks/evidence.py's mechanics on the tiny model: each run nominates its best checkpoint on validation and
looks once at test; the gate decides per recipe; JSON, table and plot are written; a rerun keeps finished runs and
starts an unfinished one over."""
from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.benchmarks import load_benchmark

PRESET = {"base_model": "tiny-random",
          "sft": {"steps": 2, "config": {"batch_size": 2, "learning_rate": 1e-3, "save_every": 2}},
          "grpo": {"steps": 2, "config": {"num_generations": 2, "batch_size": 1, "max_new_tokens": 8,
                                          "learning_rate": 1e-3, "save_every": 2}},
          "eval": {"max_new_tokens": 8}}


def _module():
    return load_benchmark("evidence")


def test_evidence_runs_gates_renders_and_resumes(tmp_path, monkeypatch):
    monkeypatch.setenv("STATESET_AGENTS_CACHE", str(tmp_path / "cache"))
    evidence = _module()
    work, out, lines = tmp_path / "work", tmp_path / "results", []
    plan = [("samples", "sft", 2)]
    report = evidence.run(plan, fast=True, work=work, output=out, log=lines.append, preset=PRESET)
    (group,) = report["groups"]
    assert [r["seed"] for r in group["runs"]] == [0, 1]
    for r in group["runs"]:
        run = Path(r["run"])
        nomination = json.loads((run / "nomination.json").read_text())
        assert r["nominated_checkpoint"] == nomination["step"]
        assert len((run / "test_looks.jsonl").read_text().splitlines()) == 1
        assert r["test"]["statistics"]["cases"] == 40
    assert "promoted" in group["gate"] and group["gate"]["cases"] == 40
    table = (out / "evidence_fast_samples.md").read_text()
    assert table.count("| samples | sft | ") == 3  # two runs and the gate row
    assert (out / "evidence_fast_samples.png").stat().st_size > 0
    assert json.loads((out / "evidence_fast_samples.json").read_text())["groups"][0]["recipe"] == "sft"

    # a run killed midway leaves its folder without the completion record: the rerun keeps seed 0, redoes seed 1
    seed1 = Path(group["runs"][1]["run"]).parents[1]
    (seed1 / evidence.DONE).unlink()
    kept = (Path(group["runs"][0]["run"]) / "nomination.json").read_bytes()
    lines.clear()
    again = evidence.run(plan, fast=True, work=work, output=out, log=lines.append, preset=PRESET)
    assert any("seed 0: done earlier, kept" in line for line in lines)
    assert any("seed 1: an unfinished run, started over" in line for line in lines)
    assert (Path(group["runs"][0]["run"]) / "nomination.json").read_bytes() == kept
    assert [r["seed"] for r in again["groups"][0]["runs"]] == [0, 1]


def test_a_partial_plan_names_its_sources():
    evidence = _module()
    assert evidence.results_name(evidence.PLAN, fast=False) == "evidence"
    assert evidence.results_name([("tau-airline", "sft->grpo", 3)], fast=False) == "evidence_tau-airline"
    assert evidence.results_name([("samples", "sft", 2)], fast=True) == "evidence_fast_samples"
