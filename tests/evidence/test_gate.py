"""The promotion gate: each failure path, the passing path, and promotion.json's citations."""
from __future__ import annotations

import json

from stateset_agents.cli import main
from stateset_agents.core.jsonio import sha256_file
from stateset_agents.pipeline.gate import run_gate
from tests.evidence.evidence_helpers import train


def fabricate_scores(run, deltas):
    """Rewrite a run's own held-out results (the gate reuses them: same cases, reward and decoding) so the gate
    sees a chosen per-case change. Only the scores change."""
    path = run / "eval_results.json"
    results = json.loads(path.read_text())
    for case, delta in zip(results["cases"], deltas):
        case["base"]["score"] = 0.5
        case["candidate"]["score"] = 0.5 + delta
        case["difference"] = delta
    path.write_text(json.dumps(results))


def gate_cli(runs, prompts, out, *extra):
    return main(["gate", "--runs", *map(str, runs), "--prompts", str(prompts), "--reward", "toy_digits",
                 "--output", str(out), *extra])


def test_too_few_seeds_fails_and_cites_every_manifest(trained_runs, workspace, tmp_path, capsys):
    rc = gate_cli(trained_runs, workspace / "held_out.txt", tmp_path / "gate")
    assert rc == 1
    record = json.loads((tmp_path / "gate" / "promotion.json").read_text())
    assert record["promoted"] is False and "min_seeds" in record["failed_conditions"]
    assert "2 distinct seed(s)" in next(c for c in record["conditions"] if c["name"] == "min_seeds")["detail"]
    assert {r["manifest_sha256"] for r in record["runs"]} == {sha256_file(r / "manifest.json") for r in trained_runs}
    assert all(r["reused_run_evaluation"] for r in record["runs"])  # same prompts: the runs' own results
    assert record["criteria"] == {"min_seeds": 6, "alpha": 0.05, "tolerance": 0.2}
    assert not (trained_runs[0] / "promotion.json").exists()  # only a passing gate marks the runs
    assert "min_seeds" in capsys.readouterr().err


def test_other_prompts_are_evaluated_afresh(trained_runs, workspace, tmp_path):
    prompts = tmp_path / "other.txt"
    prompts.write_text("numbers please\nhow many days in a week\nsay 42\n")
    record = run_gate(trained_runs, prompts, "toy_digits", tmp_path / "gate", min_seeds=2)
    assert not any(r["reused_run_evaluation"] for r in record["runs"])
    assert record["prompts"]["cases"] == 3 and len(record["cases"]) == 3
    for i, run in enumerate(trained_runs):
        ev = json.loads((tmp_path / "gate" / "evaluations" / f"{i:02d}-{run.name}" / "eval_results.json").read_text())
        assert len(ev["cases"]) == 3 and "statistics" in ev


def test_a_passing_gate_promotes_and_marks_each_run(run_copy, workspace, tmp_path):
    runs = [run_copy(0), run_copy(1)]
    for run in runs:
        fabricate_scores(run, [0.3, 0.2, 0.25, 0.1, 0.4, 0.3])
    record = run_gate(runs, workspace / "held_out.txt", "toy_digits", tmp_path / "gate", min_seeds=2)
    assert record["promoted"] is True and record["failed_conditions"] == []
    assert record["statistics"]["p_value"] == 2 / 64  # six cases, all better, exact
    for run in runs:
        assert json.loads((run / "promotion.json").read_text())["promoted"] is True


def test_a_case_falling_past_the_tolerance_fails(run_copy, workspace, tmp_path):
    runs = [run_copy(0), run_copy(1)]
    for run in runs:
        fabricate_scores(run, [0.3, 0.3, 0.3, 0.3, 0.3, -0.25])
    # with six cases and one of them worse, p >= 4/64 whatever the sizes: alpha 0.1 isolates the regression
    record = run_gate(runs, workspace / "held_out.txt", "toy_digits", tmp_path / "gate", min_seeds=2, alpha=0.1)
    assert record["failed_conditions"] == ["no_case_regression"]
    assert [c["id"] for c in record["regressions"]] == ["line6"]
    # a looser tolerance lets the same evidence through
    assert run_gate(runs, workspace / "held_out.txt", "toy_digits", tmp_path / "gate2", min_seeds=2, alpha=0.1,
                    tolerance=0.3)["promoted"]


def test_a_gain_that_is_not_significant_fails(run_copy, workspace, tmp_path):
    runs = [run_copy(0), run_copy(1)]
    for run in runs:
        fabricate_scores(run, [0.1, -0.05, 0.1, -0.05, 0.1, 0.0])
    record = run_gate(runs, workspace / "held_out.txt", "toy_digits", tmp_path / "gate", min_seeds=2)
    assert record["failed_conditions"] == ["significant_gain"]
    assert record["statistics"]["p_value"] >= 0.05 and record["statistics"]["mean_difference"] > 0


def test_runs_of_different_configurations_fail(trained_runs, tiny_model_dir, workspace, tmp_path):
    other = train(tiny_model_dir, workspace, tmp_path / "other", 2, learning_rate=1e-3)
    record = run_gate([trained_runs[0], other], workspace / "held_out.txt", "toy_digits", tmp_path / "gate",
                      min_seeds=2)
    assert "same_configuration" in record["failed_conditions"]
    assert "config_without_seed" in next(c for c in record["conditions"]
                                         if c["name"] == "same_configuration")["detail"]


def test_bad_gate_arguments(trained_runs, workspace, tmp_path, capsys):
    assert gate_cli(trained_runs[:1], workspace / "held_out.txt", tmp_path / "g", "--min-seeds", "1") == 2
    assert "descriptive only" in capsys.readouterr().err
    assert gate_cli([trained_runs[0], trained_runs[0]], workspace / "held_out.txt", tmp_path / "g") == 2
