"""One rank of a `train --nproc N` run, as torchrun starts it: ``python -m stateset_plugins.trainers.rank WORK``
(WORK: the launcher's directory, `launch`). The process group comes from torchrun's environment
(`distributed.from_env`); the run is `run.train_run` with that world."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _reward(request: Mapping[str, Any]):
    """A ``reward_class`` ("module:Class", built with reward_config) the ranks import; else None, and each rank
    loads the ``reward`` component itself."""
    target = request.get("reward_class")
    if not target:
        return None
    import importlib

    module, _, name = str(target).partition(":")
    return getattr(importlib.import_module(module), name)(**dict(request.get("reward_config") or {}))


def main(argv: list[str]) -> int:
    import torch

    from stateset_plugins.trainers import distributed
    from stateset_plugins.trainers.run import train_run

    work = Path(argv[0])
    world = distributed.from_env()
    if os.environ.get("STATESET_DDP_DEVICE") == "cpu" or not torch.cuda.is_available():
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    request = json.loads((work / "request.json").read_text())
    stop = threading.Event()

    def watch() -> None:  # the parent's cooperative stop
        while not stop.is_set():
            if (work / "STOP").exists():
                stop.set()
            time.sleep(0.1)

    threading.Thread(target=watch, daemon=True).start()
    last: dict[str, Any] = {}
    fd = os.open(work / f"events-{world.rank}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for event in train_run(request, reward=_reward(request), stop=stop, handle_signals=True, world=world):
            last = event
            if world.is_main or event.get("type") == "failed":
                os.write(fd, (json.dumps(event, default=str) + "\n").encode())  # one write(2): a whole line
    finally:
        os.close(fd)
        stop.set()
        distributed.shutdown()
    if last.get("type") == "completed":
        return 0
    return 130 if last.get("reason") == "interrupted" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
