"""trainer:openrlhf: a plan rendered as OpenRLHF 0.11.2's own inputs, and a launch of `openrlhf.cli.train_ppo_ray`.

Rendered into RUN/engine/: ``prompts.jsonl`` (its prompt format: ``input`` holds the chat messages, taken with
``--data.apply_chat_template``, ``label`` names the rendered row), ``args.json`` / ``command.json`` (the
`train_ppo_ray` arguments; the reward is ``--reward.remote_url``, the flag 0.11.2 gives the remote-RM URL, pointing
at our scorer: its address and token are filled in at launch, ``{SCORER_URL}`` in the rendered files).
Algorithms as OpenRLHF names them: GRPO (advantage estimator group_norm, KL as a loss), PPO (gae and a critic),
GSPO (group_norm, policy_loss_type gspo), DAPO (group_norm, clip-higher 0.2/0.28, dynamic filtering).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import orjson

from stateset_agents.core.errors import InputError, StatesetError
from stateset_agents.core.jsonio import atomic_write, write_json

from .plan import finite_metrics
from .render import chat_prompt, row_key

DATA = "prompts.jsonl"
SCORES = "scores.jsonl"
MODEL = "model"
URL_PLACEHOLDER = "{SCORER_URL}"

ALGORITHMS: dict[str, dict[str, Any]] = {
    "grpo": {"--algo.advantage.estimator": "group_norm", "--algo.kl.use_loss": True, "--algo.kl.estimator": "k3"},
    "ppo": {"--algo.advantage.estimator": "gae"},
    "gspo": {"--algo.advantage.estimator": "group_norm", "--actor.policy_loss_type": "gspo"},
    "dapo": {"--algo.advantage.estimator": "group_norm", "--actor.eps_clip_low_high": [0.2, 0.28],
             "--algo.dynamic_filtering_enable": True, "--algo.dynamic_filtering_range": [0.01, 0.99]},
}

DEFAULTS: dict[str, Any] = {
    "--rollout.n_samples_per_prompt": 8, "--rollout.batch_size": 64, "--rollout.micro_batch_size": 4,
    "--train.batch_size": 128, "--train.micro_batch_size": 4, "--rollout.max_new_tokens": 512,
    "--data.max_len": 1536, "--actor.adam.lr": 1e-5, "--ds.lora.rank": 16, "--ds.lora.alpha": 32,
    "--vllm.num_engines": 2, "--actor.num_gpus_per_node": 8, "--ref.num_gpus_per_node": 8,
    "--critic.num_gpus_per_node": 8, "--ds.zero_stage": 2, "--train.colocate_all": True,
}

OWNED = ("--actor.model_name_or_path", "--critic.model_name_or_path", "--data.prompt_dataset", "--data.input_key",
         "--data.label_key", "--data.apply_chat_template", "--reward.remote_url", "--reward.model_name_or_path",
         "--train.seed", "--ckpt.output_dir", "--ckpt.path", "--ckpt.save_steps", "--train.num_episodes",
         "--algo.advantage.estimator")


def arguments(plan: Mapping[str, Any], out: Path, rows: int) -> list[str]:
    """The `openrlhf.cli.train_ppo_ray` argv for `plan` (the scorer URL left as a placeholder)."""
    user = {k if k.startswith("--") else f"--{k}": v for k, v in plan["engine_config"].items()}
    for key in user:
        if key in OWNED:
            raise InputError(f"engine_config.{key.lstrip('-')} is decided by the plan (--base-model, --seed, "
                             "--steps, --save-every, --reward, the dataset)", field="engine_config")
    values: dict[str, Any] = {**DEFAULTS, **ALGORITHMS[plan["algorithm"]], **user}
    batch = min(int(values["--rollout.batch_size"]), rows)
    values["--rollout.batch_size"] = batch
    model = plan["model"]["id"]
    values.update({
        "--actor.model_name_or_path": model, "--data.prompt_dataset": str(out / DATA), "--data.input_key": "input",
        "--data.label_key": "label", "--data.apply_chat_template": True, "--reward.remote_url": URL_PLACEHOLDER,
        "--train.seed": plan["seed"], "--ckpt.output_dir": str(out / MODEL), "--ckpt.path": str(out / "checkpoints"),
        "--ckpt.save_steps": plan["save_every"],
        # OpenRLHF counts episodes over the prompts, not updates: enough episodes for the plan's steps
        "--train.num_episodes": max(1, math.ceil(plan["steps"] * batch / rows)),
    })
    if plan["algorithm"] == "ppo":
        values["--critic.model_name_or_path"] = model
    argv: list[str] = []
    for key, value in values.items():
        if value is True:
            argv.append(key)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            argv += [key, *(str(v) for v in value)]
        else:
            argv += [key, str(value)]
    return argv


def render(out: Path, plan: Mapping[str, Any], digest: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    with atomic_write(out / DATA) as f:
        for i, row in enumerate(rows):
            f.write(orjson.dumps({"input": chat_prompt(row["prompt"]), "label": row_key(i),
                                  "experiment_digest": digest}) + b"\n")
    argv = arguments(plan, out, len(rows))
    write_json(out / "args.json", {"experiment_digest": digest, "module": "openrlhf.cli.train_ppo_ray",
                                   "argv": argv})
    write_json(out / "command.json", {"experiment_digest": digest, "module": "openrlhf.cli.train_ppo_ray",
                                      "argv": ["-m", "openrlhf.cli.train_ppo_ray", *argv],
                                      "fill": {URL_PLACEHOLDER: "the scorer's OpenRLHF URL (loopback, token)"}})
    return [DATA, "args.json", "command.json"]


def launch_argv(argv: Sequence[str], scorer) -> list[str]:
    return [scorer.openrlhf_url if a == URL_PLACEHOLDER else a for a in argv]


def collect(out: Path, digest: str) -> dict[str, Any]:
    """OpenRLHF's results, refused unless our scorer logged finite rewards of this run and a model was saved."""
    path = out / SCORES
    if not path.is_file():
        raise StatesetError(f"{path}: OpenRLHF asked our scorer for no reward; the run is refused")
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    if any(r.get("experiment_digest") != digest for r in rows):
        raise StatesetError(f"{path}: scores of another experiment; the run is refused")
    flat = finite_metrics(rows, str(path))
    saved = out / MODEL
    if not any(saved.glob("*.safetensors")) and not any(saved.glob("*.bin")):
        raise StatesetError(f"{saved}: OpenRLHF saved no weights; the run is refused")
    return {"experiment_digest": digest, "reward_batches": len(flat), "final_metrics": flat[-1],
            "model": MODEL}
