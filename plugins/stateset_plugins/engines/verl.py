"""trainer:verl: a plan rendered as verl 0.9.1's own inputs, and a launch of `verl.trainer.main_ppo` in verl's venv.

Rendered into RUN/engine/: ``train.parquet`` (verl's columns: ``data_source``, ``prompt`` (chat messages),
``ability``, ``reward_model`` {``style``, ``ground_truth``}, ``extra_info`` {``index``, ``stateset_key``,
``experiment_digest``}), ``reward_fn.py`` (verl's custom reward function, calling our scorer),
``overrides.txt`` (the Hydra overrides for `verl.trainer.main_ppo`, one a line) and ``command.json``.
Algorithms as verl names them: GRPO (adv_estimator=grpo), PPO (gae + a critic), GSPO (grpo advantages,
policy_loss.loss_mode=gspo, sequence-mean loss), DAPO (grpo advantages, clip-higher, token-mean loss, group
filtering on the reward).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import write_json

from .plan import finite_metrics
from .render import chat_prompt, ground_truth, row_key

REWARD_FN = "reward_fn.py"
DATA = "train.parquet"
METRICS = "metrics.jsonl"
CHECKPOINTS = "checkpoints"

ALGORITHMS: dict[str, dict[str, Any]] = {
    "grpo": {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.actor.use_kl_loss": True,
             "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla"},
    "ppo": {"algorithm.adv_estimator": "gae", "actor_rollout_ref.actor.use_kl_loss": False,
            "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla"},
    "gspo": {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.actor.use_kl_loss": False,
             "actor_rollout_ref.actor.policy_loss.loss_mode": "gspo",
             "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
             "actor_rollout_ref.actor.clip_ratio_low": 0.0003, "actor_rollout_ref.actor.clip_ratio_high": 0.0004},
    "dapo": {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.actor.use_kl_loss": False,
             "actor_rollout_ref.actor.policy_loss.loss_mode": "vanilla",
             "actor_rollout_ref.actor.loss_agg_mode": "token-mean",
             "actor_rollout_ref.actor.clip_ratio_low": 0.2, "actor_rollout_ref.actor.clip_ratio_high": 0.28,
             "algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "score"},
}

#: defaults a plan's engine_config may change (LoRA on one 8-GPU node, vLLM rollouts)
DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 64, "data.max_prompt_length": 1024, "data.max_response_length": 512,
    "actor_rollout_ref.rollout.n": 8, "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.model.lora_rank": 16, "actor_rollout_ref.model.lora_alpha": 32,
    "actor_rollout_ref.actor.optim.lr": 1e-5, "actor_rollout_ref.actor.ppo_mini_batch_size": 32,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 4,
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 4,
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 4,
    "actor_rollout_ref.actor.kl_loss_coef": 0.001, "trainer.n_gpus_per_node": 8, "trainer.nnodes": 1,
}

#: keys the plan decides (its model, data, seed, steps, reward, outputs): engine_config may not set them
OWNED = ("data.train_files", "data.val_files", "data.prompt_key", "data.reward_fn_key", "data.seed",
         "actor_rollout_ref.model.path", "critic.model.path", "reward.custom_reward_function.",
         "reward.reward_manager.", "trainer.total_training_steps", "trainer.default_local_dir",
         "trainer.experiment_name", "trainer.project_name", "trainer.logger", "trainer.save_freq",
         "actor_rollout_ref.rollout.seed", "algorithm.adv_estimator")

_PLAIN = re.compile(r"^[A-Za-z0-9_./:@+-]+$")


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.match(text) and text not in ("true", "false", "null"):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def overrides(plan: Mapping[str, Any], digest: str, out: Path) -> list[str]:
    """The Hydra overrides of `verl.trainer.main_ppo` for `plan`, rendered under `out` (absolute paths)."""
    user = dict(plan["engine_config"])
    for key in user:
        if any(key.lstrip("+") == o or (o.endswith(".") and key.lstrip("+").startswith(o)) for o in OWNED):
            raise InputError(f"engine_config.{key} is decided by the plan (--base-model, --seed, --steps, "
                             "--save-every, --reward, the dataset) and cannot be overridden", field="engine_config")
    model = plan["model"]["id"]
    values: dict[str, Any] = {
        **DEFAULTS, **ALGORITHMS[plan["algorithm"]],
        "data.train_files": str(out / DATA), "data.val_files": str(out / DATA), "data.prompt_key": "prompt",
        "data.reward_fn_key": "data_source", "data.seed": plan["seed"],
        "actor_rollout_ref.model.path": model, "actor_rollout_ref.rollout.seed": plan["seed"],
        "reward.custom_reward_function.path": str(out / REWARD_FN),
        "reward.custom_reward_function.name": "compute_score", "reward.reward_manager.name": "naive",
        "trainer.total_training_steps": plan["steps"], "trainer.save_freq": plan["save_every"],
        "trainer.default_local_dir": str(out / CHECKPOINTS), "trainer.project_name": "stateset_agents",
        "trainer.experiment_name": digest[:16], "trainer.logger": ["console", "file"],
        "trainer.val_before_train": False, "trainer.test_freq": -1,
    }
    if plan["algorithm"] == "ppo":
        values["critic.model.path"] = model
    values.update(user)
    if plan["algorithm"] == "ppo" and "critic.ppo_micro_batch_size_per_gpu" not in user:
        values["critic.ppo_micro_batch_size_per_gpu"] = values["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]
    return [f"{key}={hydra_value(value)}" for key, value in values.items()]


def render(out: Path, plan: Mapping[str, Any], digest: str, rows: Sequence[Mapping[str, Any]],
           source_file: Path) -> list[str]:
    """Write verl's inputs into `out`; returns the rendered files (relative to `out`)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise StatesetError("trainer:verl writes verl's parquet with pyarrow: pip install pyarrow") from None
    data_source = f"stateset_agents/{plan['reward']['component']}"
    table = pa.Table.from_pylist([{
        "data_source": data_source, "prompt": chat_prompt(row["prompt"]), "ability": "conversation",
        "reward_model": {"style": "rule", "ground_truth": ground_truth(row)},
        "extra_info": {"index": i, "stateset_key": row_key(i), "row_id": str(row.get("id")),
                       "experiment_digest": digest},
    } for i, row in enumerate(rows)])
    table = table.replace_schema_metadata({b"stateset_agents.experiment_digest": digest.encode()})
    tmp = out / (DATA + ".tmp")
    pq.write_table(table, tmp)
    tmp.replace(out / DATA)
    text = source_file.read_text(encoding="utf-8")
    marker = "EXPERIMENT_DIGEST = None"
    if marker not in text:
        raise StatesetError(f"{source_file}: the reward function template lost its digest line")
    (out / REWARD_FN).write_text(text.replace(marker, f"EXPERIMENT_DIGEST = {digest!r}", 1), encoding="utf-8")
    lines = overrides(plan, digest, out)
    (out / "overrides.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_json(out / "command.json", {"experiment_digest": digest, "module": "verl.trainer.main_ppo",
                                      "argv": ["-m", "verl.trainer.main_ppo", *lines],
                                      "env": ["STATESET_AGENTS_SCORER_URL", "STATESET_AGENTS_SCORER_TOKEN",
                                              "VERL_FILE_LOGGER_PATH"]})
    return [DATA, REWARD_FN, "overrides.txt", "command.json"]


def launch_env(out: Path, scorer) -> dict[str, str]:
    return {"STATESET_AGENTS_SCORER_URL": scorer.url, "STATESET_AGENTS_SCORER_TOKEN": scorer.token,
            "VERL_FILE_LOGGER_PATH": str(out / METRICS)}


def collect(out: Path, digest: str) -> dict[str, Any]:
    """verl's results, refused unless its file logger wrote finite metrics and a checkpoint exists."""
    import json

    path = out / METRICS
    if not path.is_file():
        raise StatesetError(f"{path}: verl wrote no metrics; the run is refused")
    rows = []
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        try:
            rows.append(json.loads(line)) if line.strip() else None
        except ValueError:
            raise StatesetError(f"{path}: line {number} is not JSON; the run is refused") from None
    # verl's file logger writes with orjson, which turns NaN and infinities into null: a null metric is refused too
    flat = finite_metrics(({"step": r.get("step"), **(r.get("data") or {})} for r in rows), str(path),
                          null_is_nonfinite=True)
    steps = sorted((out / CHECKPOINTS).glob("global_step_*"))
    if not steps or not any(p.is_file() for p in steps[-1].rglob("*")):
        raise StatesetError(f"{out / CHECKPOINTS}: verl saved no checkpoint; the run is refused")
    return {"experiment_digest": digest, "steps": flat[-1].get("step"), "final_metrics": flat[-1],
            "checkpoint": str(steps[-1].relative_to(out))}
