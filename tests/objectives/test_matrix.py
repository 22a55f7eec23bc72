"""The algorithm matrix's default task: GRPO beats the untrained model on held-out prompts, and the command writes
its table, JSONL and plot."""
from __future__ import annotations

import json

from stateset_agents.plugin_api import stats
from tests.helpers.benchmarks import load_benchmark

algorithms = load_benchmark("algorithms")


def test_grpo_beats_the_untrained_model_on_held_out_prompts():
    """One seed, the default budget: paired by held-out prompt (16 prompts, 4 samples each), two-sided sign-flip
    (fewer than 6 seeds cannot reach p < 0.05 paired by seed; the six-seed test below does that)."""
    run = algorithms.run_isolated("grpo", 0, 40, "tiny-random", algorithms.BUDGET)
    result = stats.paired_comparison(run["heldout_base"], run["heldout_candidate"])
    assert result["mean_difference"] > 0.1 and result["p_value"] < 0.05, result
    assert run["steps"] == 40 and run["peak_rss_mb"] > 0 and run["kl"] >= 0


def test_grpo_beats_the_untrained_model_across_six_seeds(tmp_path):
    """The matrix's own claim: six seeds, paired by seed (~20 s on the tiny model)."""
    summary = algorithms.run_matrix(["grpo"], seeds=6, out=tmp_path, log=lambda _: None)
    versus = summary["algorithms"]["grpo"]["vs_untrained"]
    assert versus["improved"] == 6 and versus["p_value"] < 0.05, versus


def test_benchmark_command_writes_table_jsonl_and_plot(tmp_path):
    from stateset_agents.cli import main

    out = tmp_path / "m"
    assert main(["benchmark", "algorithms", "--algorithms", "grpo,cispo", "--seeds", "2", "--steps", "2",
                 "--output", str(out)]) == 0
    runs = [json.loads(x) for x in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["algorithm"], r["seed"]) for r in runs] == [("grpo", 0), ("cispo", 0), ("grpo", 1), ("cispo", 1)]
    assert runs[0]["config"] == {**runs[1]["config"]}  # matched budgets
    table = (out / "table.md").read_text()
    assert "| cispo |" in table and "sign-flip" in table and "seed" in table
    assert (out / "curves.png").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert "vs_grpo" in summary["algorithms"]["cispo"]
