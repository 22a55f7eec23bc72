"""`quickstart --fast`: the whole loop on the bundled sample logs, end to end, on the tiny offline model."""
from __future__ import annotations

import json

from stateset_agents.cli import main


def test_quickstart_fast_runs_the_whole_loop_and_can_run_again(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("STATESET_AGENTS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "qs"
    assert main(["quickstart", "--fast", "--output", str(out)]) == 0
    summary = json.loads((out / "ingested" / "ingest_summary.json").read_text())
    assert summary["written"] == 96 and summary["rejected"] == 0
    improve = json.loads((out / "improved" / "improve_summary.json").read_text())
    assert improve["counts"]["curated"] > 0
    sft = json.loads((out / "runs" / "sft" / "manifest.json").read_text())
    assert sft["algorithm"] == "sft" and sft["status"] == "completed"
    run = out / "runs" / "grpo"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["committed_updates"] == 4
    assert manifest["lineage"]  # training rows trace back to the sample log's lines
    assert manifest["parent"]["adapter_sha256"]  # GRPO started from the SFT parent
    # validation chose the checkpoint; the nominated one had exactly one look at the frozen test cases
    nomination = json.loads((run / "nomination.json").read_text())
    assert nomination["step"] == manifest["selection"]["best_on_validation"]
    looks = [json.loads(line) for line in (run / "test_looks.jsonl").read_text().splitlines()]
    assert len(looks) == 1 and not looks[0]["again"]
    results = json.loads((run / "test" / f"step-{nomination['step']:06d}" / "eval_results.json").read_text())
    assert len(results["cases"]) == 40 and results["split"] == "test" and "statistics" in results
    assert "complete_cases" in results and results["protocol"]["decoding"] == "greedy"
    summary = json.loads((out / "quickstart_summary.json").read_text())
    assert summary["recipe"] == "sft->grpo" and summary["nominated_checkpoint"] == nomination["step"]
    assert {"exact_tool_call_match", "tool_name_match", "nsr"} <= set(summary["unoptimised"])
    printed = capsys.readouterr().out
    assert "test reward:tool_calling" in printed and "nominated checkpoint" in printed
    # A second run replaces its own earlier output; a folder it did not make is refused.
    assert main(["quickstart", "--fast", "--output", str(out)]) == 0
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert main(["quickstart", "--fast", "--output", str(other)]) != 0
    assert (other / "notes.txt").read_text() == "keep me"


def test_the_summary_says_how_far_regressed_cases_fell_beside_the_gates_tolerance():
    from stateset_agents.cli.quickstart_cmd import _regressions_line

    small = [{"id": "test-26", "base": 0.1, "candidate": 0.05, "difference": -0.05}]
    assert _regressions_line(small) == ("1; largest drop 0.050 (test-26: 0.100 -> 0.050); none past the gate's "
                                        "tolerance of 0.2")
    big = small + [{"id": "test-03", "base": 1.0, "candidate": 0.25, "difference": -0.75}]
    assert _regressions_line(big).startswith("2; largest drop 0.750 (test-03: 1.000 -> 0.250); 1 past")
