"""Fixtures for the evidence tests: real training runs on the tiny offline model (trained once per session), the
toy reward registered by name, and a held-out prompt file that does not overlap the training rows."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from tests.evidence.evidence_helpers import HELD_OUT, SEEDS, train, write_jsonl  # noqa: E402
from tests.helpers.toy_rewards import make_rows  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")



@pytest.fixture(autouse=True)
def toy_reward_registered(monkeypatch):
    from stateset_agents.core.registry import PLUGIN_MODULES_ENV, get_registry

    modules = [m for m in os.environ.get(PLUGIN_MODULES_ENV, "").split(",") if m]
    # a dotted name: subprocess-served components import it through the repo root on PYTHONPATH (tests/conftest.py)
    monkeypatch.setenv(PLUGIN_MODULES_ENV, ",".join(modules + ["tests.evidence.evidence_toy_plugin"]))
    get_registry(refresh=True)
    yield
    monkeypatch.undo()
    get_registry(refresh=True)


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Path:
    """A source log, a curated dataset whose rows point at its lines, and held-out prompts."""
    from stateset_agents.core.jsonio import sha256_file

    root = tmp_path_factory.mktemp("workspace")
    log = write_jsonl(root / "support_log.jsonl",
                      [{"messages": [{"role": "user", "content": r["prompt"][0]["content"]}, r["completion"]]}
                       for r in make_rows()])
    log_sha = sha256_file(log)
    rows = make_rows()
    for i, row in enumerate(rows):
        row["lineage"].update(source_path=str(log), source_sha256=log_sha, line=i + 1)
    write_jsonl(root / "curated.jsonl", rows)
    (root / "held_out.txt").write_text("\n".join(HELD_OUT) + "\n")
    return root


@pytest.fixture(scope="session")
def trained_runs(tiny_model_dir, workspace, tmp_path_factory) -> list[Path]:
    """Two real runs of one configuration, seeds 0 and 1 (read-only: copy one before changing it)."""
    root = tmp_path_factory.mktemp("runs")
    return [train(tiny_model_dir, workspace, root / f"seed{s}", s) for s in SEEDS]


@pytest.fixture()
def run_copy(trained_runs, tmp_path):
    """copy(i) -> a private copy of trained run i, safe to change."""

    def copy(i: int = 0, name: str | None = None) -> Path:
        target = tmp_path / (name or trained_runs[i].name)
        shutil.copytree(trained_runs[i], target)
        return target

    return copy
