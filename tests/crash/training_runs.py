"""The tiny training run the train and deploy fault tests share: inputs, arguments, and the uninterrupted reference
run (computed once; a test may start it in a thread beside its own runs, on a shared 2-core machine)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from tests.helpers.toy_rewards import make_rows, write_rows

from .crashkit import run

_reference: dict = {}
_lock = threading.Lock()


def write_train_inputs(model: Path, root: Path) -> dict[str, Path]:
    """A tiny model, six rows, one held-out prompt and a config small enough for a few seconds' training."""
    prompts = root / "held_out.jsonl"
    prompts.write_text(json.dumps({"prompt": [{"role": "user", "content": "what is 4 + 4"}],
                                   "metadata": {"answer": "8"}}) + "\n")
    config = root / "train.yaml"
    config.write_text("max_new_tokens: 8\nbatch_size: 2\nnum_generations: 2\nlearning_rate: 0.02\n")
    return {"model": model, "data": write_rows(root / "curated.jsonl", make_rows()), "prompts": prompts,
            "config": config}


def train_args(inputs: dict[str, Path], output: Path, *extra: str) -> list:
    return ["train", "--dataset", inputs["data"], "--algorithm", "grpo", "--reward", "gsm8k", "--base-model",
            inputs["model"], "--eval-prompts", inputs["prompts"], "--eval-max-new-tokens", "8", "--output", output,
            "--steps", "4", "--save-every", "2", "--config", inputs["config"], *extra]


def reference_run(inputs: dict[str, Path], root: Path) -> dict:
    """{"run": its folder, "seconds": how long it took}, run on the first call only."""
    with _lock:
        if not _reference:
            began = time.monotonic()
            run(train_args(inputs, root / "run"), root, root / "state")
            _reference.update(run=root / "run", seconds=time.monotonic() - began)
        return dict(_reference)
