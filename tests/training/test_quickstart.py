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
    run = out / "runs" / "grpo"
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "completed" and manifest["committed_updates"] == 4
    assert manifest["lineage"]  # training rows trace back to the sample log's lines
    results = json.loads((run / "eval_results.json").read_text())
    assert len(results["cases"]) == 16 and "statistics" in results
    assert "held-out reward" in capsys.readouterr().out
    # A second run replaces its own earlier output; a folder it did not make is refused.
    assert main(["quickstart", "--fast", "--output", str(out)]) == 0
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    assert main(["quickstart", "--fast", "--output", str(other)]) != 0
    assert (other / "notes.txt").read_text() == "keep me"
