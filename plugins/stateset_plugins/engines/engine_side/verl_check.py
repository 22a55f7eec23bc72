"""Run INSIDE verl's venv (never imported by the project): verl's own code checks a rendered run.

`python verl_check.py CASES.json` with ``{"render_dir", "cases": [{"index", "response"}]}``:
1. Hydra composes verl's `ppo_trainer` config with the rendered overrides; `verl.utils.config.validate_config`
   (what `verl.trainer.main_ppo` runs first) and verl's config dataclasses (`omega_conf_to_dataclass` of the
   algorithm, actor, rollout and, for PPO, critic sections) accept it.
2. verl's reward manager (`load_reward_manager`, which loads our `custom_reward_function`) scores each case: the
   rendered parquet row, tokenised, with the case's response as verl's rollout would hand it over.
``also`` names more rendered runs (other algorithms) for step 1 only.
Prints one JSON line: {"verl", "validated": [...], "also": {...}, "scores": [...], "extra": [...]}.
"""
import json
import sys
from pathlib import Path


def byte_tokenizer():
    """A byte-level tokenizer built offline (no download): every text round-trips through it exactly."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<pad>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>")


def compose(render_dir: Path):
    from hydra import compose as hydra_compose, initialize_config_dir
    import verl

    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    lines = [l for l in (render_dir / "overrides.txt").read_text().splitlines() if l.strip()]
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=lines)


def check_config(render_dir: Path):
    """verl's own checks on one rendered run: validate_config and its config dataclasses."""
    import importlib.util

    from omegaconf import open_dict
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config = compose(render_dir)
    checked = config
    validated = ["validate_config"]
    if importlib.util.find_spec("vllm") is None:
        # vLLM is GPU-only: validate_config's one vLLM step (the LoRA rank vLLM allows) imports it, so on a
        # CPU host that step alone is left out, and the answer says so
        checked = config.copy()
        with open_dict(checked):
            checked.actor_rollout_ref.model.lora_rank = 0
            if checked.actor_rollout_ref.model.get("lora") is not None:
                checked.actor_rollout_ref.model.lora.rank = 0
        validated = ["validate_config (without its vLLM LoRA-rank step: no vLLM on this host)"]
    validate_config(config=checked, use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    sections = {"algorithm": config.algorithm, "actor": config.actor_rollout_ref.actor,
                "rollout": config.actor_rollout_ref.rollout}
    if need_critic(config):
        sections["critic"] = config.critic
    for name, section in sections.items():
        value = omega_conf_to_dataclass(section)
        validated.append(f"{name}: {type(value).__name__}")
    validated.append(f"adv_estimator={config.algorithm.adv_estimator}, "
                     f"loss_mode={config.actor_rollout_ref.actor.policy_loss.loss_mode}")
    return config, validated


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    render_dir = Path(spec["render_dir"])
    import numpy as np
    import pandas as pd
    import torch
    import verl
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    config, validated = check_config(render_dir)
    also = {name: check_config(Path(path))[1] for name, path in spec.get("also", {}).items()}

    tokenizer = byte_tokenizer()
    frame = pd.read_parquet(config.data.train_files)
    manager = load_reward_manager(config, tokenizer)
    scores, extra = [], []
    for case in spec["cases"]:
        row = frame.iloc[case["index"]]
        prompt_text = "".join(m["content"] for m in row["prompt"])
        prompt = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        response = tokenizer(case["response"], add_special_tokens=False)["input_ids"]
        batch = {"prompts": torch.tensor([prompt]), "responses": torch.tensor([response]),
                 "attention_mask": torch.ones(1, len(prompt) + len(response), dtype=torch.long)}
        non_tensor = {key: np.array([row[key]], dtype=object)
                      for key in ("data_source", "reward_model", "extra_info")}
        data = DataProto.from_dict(tensors=batch, non_tensors=non_tensor)
        result = manager.loop.run_until_complete(manager.run_single(data))
        scores.append(float(result["reward_score"]))
        extra.append({k: float(v) for k, v in result["reward_extra_info"].items() if isinstance(v, (int, float))})
    print(json.dumps({"verl": verl.__version__, "validated": validated, "also": also, "scores": scores,
                      "extra": extra}))


if __name__ == "__main__":
    main()
