"""Options shared by the commands that grade (improve run, train, train-remote, evaluate, gate)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

REWARD_FILE_HELP = ("Reward config file (YAML/JSON: the reward, its config and the weights `improve calibrate` "
                    "fitted); its reward is the default for --reward.")


def reward_and_config(reward: Optional[str], policy: Optional[Path], reward_file: Optional[Path], *,
                      required: bool = True) -> tuple[Optional[str], dict[str, Any]]:
    """What --reward, --policy and --reward-config name together."""
    from ..core.calibration import resolve_reward
    from ..core.errors import InputError
    from ..pipeline.improve import load_policy

    reward, config = resolve_reward(reward, {"policy": load_policy(policy)} if policy is not None else {},
                                    reward_file)
    if required and not reward:
        raise InputError("name the reward with --reward (or --reward-config)", field="reward")
    return reward, config


def eval_protocol(samples, temperature, max_new_tokens, seed=None, allow_truncation=False) -> dict[str, Any]:
    """The evaluation protocol flags (greedy unless --samples K --temperature T); a contradiction fails here, before
    a model loads (the evaluator checks the whole protocol again)."""
    from ..core.errors import InputError

    if samples is not None and samples > 1 and not (temperature or 0) > 0:
        raise InputError(f"{samples} samples per case need --temperature > 0 (greedy answers are all alike)",
                         field="temperature")
    values = {"samples": samples, "temperature": temperature, "max_new_tokens": max_new_tokens, "seed": seed,
              "allow_truncation": allow_truncation or None}
    return {k: v for k, v in values.items() if v is not None}
