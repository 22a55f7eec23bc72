"""Fixtures for the studio tests: a private state dir (autouse), a workspace holding a real `improve run` output
of the bundled support logs, and the studio's config pointing at the tiny model with small settings."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.state_dir import state_dir  # noqa: F401 - autouse: a private kernel state dir per test
from tests.studio.studio_helpers import write_config

if importlib.util.find_spec("textual") is None:  # the studio extra is not installed: nothing here can run
    collect_ignore_glob = ["test_*.py"]
SAMPLES = Path(__file__).resolve().parents[2] / "kernel" / "stateset_agents" / "samples"
#: Small settings that keep a run on the tiny model to seconds (the form sets the rest).
FAST = {"batch_size": 2, "max_new_tokens": 4, "num_generations": 2, "max_prompt_tokens": 96, "keep_checkpoints": 50}


@pytest.fixture(scope="session")
def improve_dir(tmp_path_factory):
    """`ingest` then `improve run` of the bundled support logs, through the CLI. The transcripts name their log
    by a relative path, so the curated rows (and every digest of them) are the same wherever the suite runs."""
    from stateset_agents.cli import main

    root = tmp_path_factory.mktemp("improve")
    assert main(["ingest", "-i", str(SAMPLES / "support_logs.jsonl"), "--format", "openai", "--output",
                 str(root / "ingest")]) == 0
    lines = []
    for line in (root / "ingest" / "transcripts.jsonl").read_text().splitlines():
        row = json.loads(line)
        row["source"]["path"] = "logs/support_logs.jsonl"
        lines.append(json.dumps(row))
    (root / "ingest" / "transcripts.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["improve", "run", "--transcripts", str(root / "ingest"), "--reward", "customer_support",
                 "--output", str(root / "improve")]) == 0
    return root


@pytest.fixture()
def workspace(tmp_path, improve_dir):
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copytree(improve_dir / "improve", ws / "improve")
    shutil.copytree(improve_dir / "ingest", ws / "ingest")
    return ws


@pytest.fixture()
def tiny_config(workspace, tiny_model_dir):
    return write_config(workspace, provider="local", base_model=str(tiny_model_dir), algorithm="grpo",
                        reward="customer_support", max_cost_usd=1, max_hours=0.5,
                        training=dict(FAST), eval={"max_new_tokens": 4})
