"""Run a toy training job in its own process (for the kill/resume tests): python -m tests.helpers.run_toy MODEL_DIR
OUT STEPS [--resume], with the repo root on PYTHONPATH. Prints one JSON event a line; exits 0 completed, 130
interrupted, 1 failed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from stateset_plugins.trainers.run import train_run
from tests.helpers.toy_rewards import DigitReward, make_rows, write_rows

torch.set_num_threads(1)


def main() -> int:
    model_dir, out, steps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    data = write_rows(out.parent / "rows.jsonl", make_rows())
    request = {"algorithm": "grpo", "dataset": str(data), "base_model": model_dir, "output": str(out),
               "steps": steps, "save_every": 1, "resume": "--resume" in sys.argv,
               "config": {"max_new_tokens": 8, "batch_size": 2, "num_generations": 4, "learning_rate": 2e-2}}
    last = {}
    for event in train_run(request, reward=DigitReward(), handle_signals=True):
        last = event
        print(json.dumps(event, default=str), flush=True)
    if last.get("type") == "completed":
        return 0
    return 130 if last.get("reason") == "interrupted" else 1


if __name__ == "__main__":
    sys.exit(main())
