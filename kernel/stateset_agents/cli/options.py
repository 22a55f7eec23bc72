"""Options shared by the commands that grade (improve run, train, train-remote, evaluate, gate)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

REWARD_FILE_HELP = ("Reward config file (YAML/JSON: the reward, its config and the weights `improve calibrate` "
                    "fitted); its reward is the default for --reward.")


def reward_and_config(reward: Optional[str], policy: Optional[Path], reward_file: Optional[Path], *,
                      required: bool = True) -> tuple[Optional[str], dict[str, Any]]:
    """What --reward, --policy and --reward-config name together."""
    from ..calibration import resolve_reward
    from ..errors import InputError
    from ..pipeline.improve import load_policy

    reward, config = resolve_reward(reward, {"policy": load_policy(policy)} if policy is not None else {},
                                    reward_file)
    if required and not reward:
        raise InputError("name the reward with --reward (or --reward-config)", field="reward")
    return reward, config
