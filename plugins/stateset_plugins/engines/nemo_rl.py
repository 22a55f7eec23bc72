"""trainer:nemo_rl, render-only: NeMo RL is not installable from the package registry, so this adapter writes a
config in the shape of NeMo RL's GRPO example config and the experiment digest, and claims nothing: no engine
version was checked, no config class validated it, no reward was wired (its environment interface is not driven
from here). The manifest says so (``validated: false``); it never launches.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson
import yaml

from stateset_agents.core.jsonio import atomic_write

from .render import chat_prompt, row_key

DATA = "prompts.jsonl"
CONFIG = "nemo_rl_config.yaml"
ALGORITHMS = ("grpo",)
NOTICE = ("render-only: NeMo RL is not installable from the package registry; this config was not validated by "
          "NeMo RL, and no run was started")


def render(out: Path, plan: Mapping[str, Any], digest: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    with atomic_write(out / DATA) as f:
        for i, row in enumerate(rows):
            f.write(orjson.dumps({"messages": chat_prompt(row["prompt"]), "task_name": row_key(i),
                                  "experiment_digest": digest}) + b"\n")
    config: dict[str, Any] = {
        "stateset_agents": {"experiment_digest": digest, "validated": False, "notice": NOTICE,
                            "reward": plan["reward"]},
        "grpo": {"num_prompts_per_step": min(32, len(rows)), "num_generations_per_prompt": 8,
                 "max_num_steps": plan["steps"], "seed": plan["seed"]},
        "policy": {"model_name": plan["model"]["id"], "model_revision": plan["model"]["revision"]},
        "checkpointing": {"enabled": True, "checkpoint_dir": str(out / "checkpoints"),
                          "save_period": plan["save_every"]},
        "data": {"train_data_path": str(out / DATA)},
        **plan["engine_config"],
    }
    with atomic_write(out / CONFIG) as f:
        f.write(yaml.safe_dump(config, sort_keys=True).encode())
    return [DATA, CONFIG]
