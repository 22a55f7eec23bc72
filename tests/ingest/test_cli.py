"""`stateset-agents ingest`: a thin face over `run_ingest`; fails only when nothing could be ingested."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import stateset_agents.cli.ingest_cmd  # noqa: F401  (attaches the command)
from stateset_agents.cli import main
from stateset_agents.cli.app import app

from .logs import read_outputs, write_jsonl
from .test_openai import tool_conversation


def test_ingest_prints_a_summary_and_succeeds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(Path("log.jsonl"), [{"messages": tool_conversation()}, "{bad", {"messages": [{"role": "x"}]}])
    result = CliRunner().invoke(app, ["ingest", "--format", "openai", "--input", "log.jsonl", "--output", "out",
                                      "--redact"])
    assert result.exit_code == 0, result.output
    for words in ("written", "invalid_json", "unknown_role", "transcripts.jsonl"):
        assert words in result.output
    transcripts, rejects, summary = read_outputs(Path("out"))
    assert (len(transcripts), len(rejects), summary["redact"]) == (1, 2, True)


def test_nothing_ingested_exits_non_zero_but_still_writes_the_rejects(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_jsonl(Path("log.jsonl"), ["{bad", {"messages": []}])
    result = CliRunner().invoke(app, ["ingest", "-f", "openai", "-i", "log.jsonl", "-o", "out"])
    assert result.exit_code == 1
    _, rejects, _ = read_outputs(Path("out"))
    assert [r["reason"] for r in rejects] == ["invalid_json", "no_messages"]


def test_bad_arguments_are_clear_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["ingest", "-f", "openai", "-i", "missing.jsonl", "-o", "out"]) == 2
    assert "missing.jsonl: no such file or directory" in capsys.readouterr().err
    write_jsonl(Path("log.jsonl"), [{"messages": tool_conversation()}])
    assert main(["ingest", "-f", "parquet", "-i", "log.jsonl", "-o", "out"]) == 2
    assert "unknown ingestor 'parquet'" in capsys.readouterr().err


def test_the_installed_command_runs(tmp_path):
    write_jsonl(tmp_path / "log.jsonl", [{"messages": tool_conversation()}])
    done = subprocess.run([sys.executable, "-m", "stateset_agents", "ingest", "--format", "anthropic", "--input",
                           "log.jsonl", "--output", "out"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    # An OpenAI log read as Anthropic: every line rejected (unknown role), so the run fails, and says so.
    assert done.returncode == 1, done.stderr
    assert "nothing could be ingested" in done.stderr
