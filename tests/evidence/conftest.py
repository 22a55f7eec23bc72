"""Fixtures for the evidence tests: real training runs on the tiny offline model (trained once per session), the
toy reward registered by name, and a held-out prompt file that does not overlap the training rows."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

HERE = Path(__file__).resolve().parent
TRAINING = HERE.parent / "training"
sys.path.insert(0, str(TRAINING))  # toy_rewards: the tiny model builder and the toy reward, shared, not copied
sys.path.insert(0, str(HERE))

from toy_rewards import DigitReward, build_tiny_model, make_rows  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HELD_OUT = ["give me some digits", "count to five", "what is 7 times 6", "order status please", "good morning",
            "list a few numbers"]
#: Small and fast: 2 committed updates, 8 new tokens.
RUN_CONFIG = {"steps": 2, "max_new_tokens": 8, "batch_size": 2, "num_generations": 4, "learning_rate": 2e-2,
              "save_every": 2}
SEEDS = (0, 1)


@pytest.fixture(autouse=True)
def toy_reward_registered(monkeypatch):
    from stateset_agents.registry import PLUGIN_MODULES_ENV, get_registry

    modules = [m for m in os.environ.get(PLUGIN_MODULES_ENV, "").split(",") if m]
    monkeypatch.setenv(PLUGIN_MODULES_ENV, ",".join(modules + ["evidence_toy_plugin"]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), str(TRAINING),
                                                                   os.environ.get("PYTHONPATH")])))
    get_registry(refresh=True)
    yield
    monkeypatch.undo()
    get_registry(refresh=True)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny-llama")
    build_tiny_model(path)
    return path


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Path:
    """A source log, a curated dataset whose rows point at its lines, and held-out prompts."""
    from stateset_agents.jsonio import sha256_file

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


def train(tiny_model_dir: Path, workspace: Path, output: Path, seed: int, **config) -> Path:
    from stateset_plugins.trainers.run import train_run

    request = {"algorithm": "grpo", "dataset": str(workspace / "curated.jsonl"), "base_model": str(tiny_model_dir),
               "eval_prompts": str(workspace / "held_out.txt"), "output": str(output),
               "config": {**RUN_CONFIG, **config}, "seed": seed}
    events = list(train_run(request, reward=DigitReward()))
    assert events[-1]["type"] == "completed", events[-1]
    return output


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
