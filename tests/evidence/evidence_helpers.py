"""Helpers the evidence tests import by name (a test module importing `conftest` would get whichever conftest
pytest loaded last)."""
from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.toy_rewards import DigitReward

HELD_OUT = ["give me some digits", "count to five", "what is 7 times 6", "order status please", "good morning",
            "list a few numbers"]
#: Small and fast: 2 committed updates, 8 new tokens.
RUN_CONFIG = {"steps": 2, "max_new_tokens": 8, "batch_size": 2, "num_generations": 4, "learning_rate": 2e-2,
              "save_every": 2}
SEEDS = (0, 1)


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def train(tiny_model_dir: Path, workspace: Path, output: Path, seed: int, **config) -> Path:
    from stateset_plugins.trainers.run import train_run

    request = {"algorithm": "grpo", "dataset": str(workspace / "curated.jsonl"), "base_model": str(tiny_model_dir),
               "eval_prompts": str(workspace / "held_out.txt"), "output": str(output),
               "config": {**RUN_CONFIG, **config}, "seed": seed}
    events = list(train_run(request, reward=DigitReward()))
    assert events[-1]["type"] == "completed", events[-1]
    return output
