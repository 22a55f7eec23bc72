"""Reward calibration: a reward's check weights fitted to a team's labels (`improve calibrate`), and the reward
config file that carries them (`--reward-config reward.yaml`).

A reward config may hold the reserved key `$calibration`. `Reward` strips it before the reward sees its config
(so any reward, a third party's too, can be calibrated without knowing it) and re-scores every applicable turn from
the turn's top-level numeric breakdown entries (its checks):

    score = 1 / (1 + exp(-(intercept + sum_f weights[f] * x_f)))

where x_f is the breakdown's entry f when it is a number (a bool counts 0/1), else `fill[f]` (a check the turn did
not judge). Not-applicable turns are left as they are. The calibration is part of the config, so the config's sha256
(in every grade row's `reward` identity and in the manifests) changes with it.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from .errors import InputError

CALIBRATION_KEY = "$calibration"
REWARD_FILE_SCHEMA = 1


def check_calibration(calibration: Any, *, where: str = CALIBRATION_KEY) -> dict[str, Any]:
    """The calibration as a plain mapping, or an InputError naming the bad field."""
    def bad(message: str, field: str) -> InputError:
        return InputError(message, field=f"{where}.{field}" if field else where)

    if not isinstance(calibration, Mapping):
        raise bad("expected a mapping (features, intercept, weights, fill)", "")
    features = calibration.get("features")
    if not isinstance(features, list) or not features or not all(isinstance(f, str) and f for f in features):
        raise bad("expected a non-empty list of breakdown keys", "features")
    if len(set(features)) != len(features):
        raise bad("a feature is named twice", "features")
    intercept = calibration.get("intercept")
    if not _finite(intercept):
        raise bad("expected a finite number", "intercept")
    for key in ("weights", "fill"):
        table = calibration.get(key)
        if not isinstance(table, Mapping) or set(table) != set(features):
            raise bad("expected one number for each feature", key)
        for name, value in table.items():
            if not _finite(value):
                raise bad("expected a finite number", f"{key}.{name}")
    return dict(calibration)


def _finite(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def feature_value(breakdown: Mapping[str, Any], name: str, fill: float) -> float:
    """A check's value in a turn's breakdown: a number (bool 0/1), else `fill` (the turn did not judge it)."""
    value = breakdown.get(name)
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return float(fill)


def calibrated_score(calibration: Mapping[str, Any], breakdown: Mapping[str, Any]) -> float:
    weights, fill = calibration["weights"], calibration["fill"]
    z = float(calibration["intercept"]) + sum(
        float(weights[f]) * feature_value(breakdown, f, fill[f]) for f in calibration["features"])
    # Written to stay finite for any z (exp of a large positive number overflows).
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def split_config(config: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the reward's own config, the calibration or None)."""
    own = dict(config or {})
    calibration = own.pop(CALIBRATION_KEY, None)
    return own, (check_calibration(calibration) if calibration is not None else None)


def load_reward_file(path: str | os.PathLike) -> tuple[str, dict[str, Any]]:
    """A `--reward-config` file (YAML, or JSON by its suffix): `{"schema_version": 1, "reward": NAME, "config":
    {...}, "calibration": {...}}` -> (reward name, config with the calibration under `$calibration`)."""
    shown = str(path)
    try:
        text = open(path, encoding="utf-8").read()
    except FileNotFoundError:
        raise InputError("reward config file not found", path=shown) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the reward config: {exc}", path=shown) from None
    if shown.endswith(".json"):
        import json

        try:
            data = json.loads(text)
        except ValueError as exc:
            raise InputError(f"cannot parse the reward config as JSON: {exc}", path=shown) from None
    else:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise InputError(f"cannot parse the reward config as YAML: {exc}", path=shown) from None
    if not isinstance(data, Mapping):
        raise InputError("expected a mapping with `reward` and `config`", path=shown)
    version = data.get("schema_version", REWARD_FILE_SCHEMA)
    if version != REWARD_FILE_SCHEMA:
        raise InputError(f"unsupported schema_version {version!r}; this version reads {REWARD_FILE_SCHEMA}",
                         path=shown, field="schema_version")
    reward = data.get("reward")
    if not isinstance(reward, str) or not reward:
        raise InputError("expected the reward's name", path=shown, field="reward")
    config = data.get("config") or {}
    if not isinstance(config, Mapping):
        raise InputError("expected a mapping (the reward's own config)", path=shown, field="config")
    if CALIBRATION_KEY in config:
        raise InputError(f"put the calibration under `calibration`, not config.{CALIBRATION_KEY}", path=shown,
                         field=f"config.{CALIBRATION_KEY}")
    config = dict(config)
    if data.get("calibration") is not None:
        try:
            config[CALIBRATION_KEY] = check_calibration(data["calibration"], where="calibration")
        except InputError as exc:
            raise InputError(exc.detail, path=shown, field=exc.field) from None
    return reward, config


def resolve_reward(reward: str | None, policy_config: Mapping[str, Any] | None,
                   reward_file: str | os.PathLike | None) -> tuple[str | None, dict[str, Any]]:
    """What the CLI's `--reward`, `--policy` and `--reward-config` together name: (reward, config). The file's reward
    must agree with `--reward` when both are given; `--policy` may not also be set inside the file."""
    config = dict(policy_config or {})
    if reward_file is None:
        return reward, config
    named, file_config = load_reward_file(reward_file)
    if reward and _bare(reward) != _bare(named):
        raise InputError(f"--reward {reward} but the reward config is for {named}", path=str(reward_file),
                         field="reward")
    clash = set(config) & set(file_config)
    if clash:
        raise InputError(f"{', '.join(sorted(clash))} given both by a flag and in the reward config",
                         path=str(reward_file), field="config")
    return reward or named, {**file_config, **config}


def _bare(name: str) -> str:
    return name.split(":", 1)[1] if name.startswith("reward:") else name
