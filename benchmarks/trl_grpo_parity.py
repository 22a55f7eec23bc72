"""Our GRPO update against TRL's own code on one batch: TRL samples and scores a batch (its `GRPOTrainer`, a LoRA
adapter moved away from the reference so the KL term has a gradient), then our advantages, reference log-probs,
loss and gradient on those exact tensors are compared with TRL's advantages, `ref_per_token_logps` and
`compute_loss`: GRPO on the batch as sampled and with its rewards all equal (the KL term alone), and GRPO, DAPO,
GSPO and CISPO on it as a reused batch (behaviour log-probs away from the live ones), where their clips act. Equal figures make `bench_grpo_vs_trl.py` a comparison of one algorithm, so a difference in the
reward curves comes from sampling, not from the update.

Usage: python benchmarks/trl_grpo_parity.py [--model DIR]   (default: the offline SmolLM2-135M-Instruct)
Writes benchmarks/results/trl_grpo_parity.json. tests/objectives/test_trl_parity.py runs the same functions on a
tiny random model.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

PROMPTS = ["what is 2 + 3", "hello"]  # two prompt lengths: the shorter rows are left-padded
RESULTS = Path(__file__).resolve().parent / "results" / "trl_grpo_parity.json"


def digit_share(text: str) -> float:
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


def _chat(prompt: str) -> list[dict]:
    return [{"role": "user", "content": prompt}]  # rendered by the tokenizer's chat template, as in the benchmark


def trl_batch(model_dir: str, *, group: int = 4, max_new_tokens: int = 16, lora_r: int = 8, beta: float = 0.04,
              seed: int = 0):
    """(TRL's trainer, the batch its `_generate_and_score_completions` returned, the rewards it scored): float32 on
    the CPU, the benchmark's GRPO settings."""
    import torch
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    rewards: list[float] = []

    def reward(prompts, completions, **_):
        # the length term keeps groups apart on a random model that writes no digits
        texts = [c[0]["content"] for c in completions]  # conversational rows: one assistant message each
        scores = [digit_share(t) + 0.01 * len(t) for t in texts]
        rewards.extend(scores)
        return scores

    args = trl.GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=len(PROMPTS) * group,
                          num_generations=group, max_completion_length=max_new_tokens, learning_rate=1e-3,
                          beta=beta, epsilon=0.2, scale_rewards="group", loss_type="grpo",
                          use_bias_correction_kl=False, mask_truncated_completions=False, temperature=1.0, top_k=0,
                          top_p=1.0, max_steps=1, report_to="none", seed=seed, use_cpu=True, bf16=False, fp16=False,
                          save_strategy="no", disable_tqdm=True)
    lora = LoraConfig(r=lora_r, lora_alpha=2 * lora_r, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")
    trainer = trl.GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward, args=args,
                              train_dataset=Dataset.from_list([{"prompt": _chat(p)} for p in PROMPTS * 4]),
                              processing_class=AutoTokenizer.from_pretrained(model_dir), peft_config=lora)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by TRL's training loop, which this does not run
    out = trainer._generate_and_score_completions([{"prompt": _chat(p)} for p in PROMPTS for _ in range(group)])
    return trainer, out, torch.tensor(rewards)


def our_batch(out, advantages, model, group: int):
    """TRL's tensors as our `Batch`, with our behaviour and reference log-probs."""
    import torch

    from stateset_plugins.models.backend import completion_logprobs
    from stateset_plugins.models.batch import Batch

    mask = out["completion_mask"].float()
    n = len(mask)
    batch = Batch(input_ids=torch.cat([out["prompt_ids"], out["completion_ids"]], 1),
                  attention_mask=torch.cat([out["prompt_mask"], out["completion_mask"]], 1),
                  prompt_width=out["prompt_ids"].shape[1], completion_mask=mask, behaviour_logp=torch.zeros_like(mask),
                  sample_ids=[str(i) for i in range(n)], groups=[str(i // group) for i in range(n)], group_size=group,
                  advantages=advantages)
    with torch.no_grad():
        batch.behaviour_logp = completion_logprobs(model, batch, 1.0)  # one update per batch: the ratio is 1
        with model.disable_adapter():
            batch.ref_logp = completion_logprobs(model, batch, 1.0)
    return batch


def _grads(model):
    import torch

    g = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad and p.grad is not None])
    model.zero_grad(set_to_none=True)
    return g


#: Our objective -> (its config, the TRL settings that compute the same loss). TRL's CISPO caps the weight at
#: `epsilon_high` itself, ours at 1 + epsilon_high; GSPO is TRL's sequence-level importance sampling.
OBJECTIVES = {
    "grpo": ({"beta": 0.04, "epsilon": 0.2},
             {"loss_type": "grpo", "beta": 0.04, "epsilon_low": 0.2, "epsilon_high": 0.2,
              "importance_sampling_level": "token"}),
    "dapo": ({"beta": 0.0, "epsilon": 0.2, "epsilon_high": 0.28},
             {"loss_type": "dapo", "beta": 0.0, "epsilon_low": 0.2, "epsilon_high": 0.28,
              "importance_sampling_level": "token"}),
    "gspo": ({"beta": 0.0, "epsilon": 3e-4, "epsilon_high": 4e-4},
             {"loss_type": "grpo", "beta": 0.0, "epsilon_low": 3e-4, "epsilon_high": 4e-4,
              "importance_sampling_level": "sequence"}),
    "cispo": ({"beta": 0.0, "epsilon": 1.0, "epsilon_high": 0.28},
              {"loss_type": "cispo", "beta": 0.0, "epsilon_low": 1.0, "epsilon_high": 1.28,
               "importance_sampling_level": "token"}),
}


def compare_update(trainer, out, *, objective: str = "grpo", group: int = 4, zero_advantages: bool = False,
                   off_policy: float = 0.0, ours: dict | None = None, seed: int = 0) -> dict:
    """TRL's `compute_loss` and our `objective` on the batch: both losses, both gradient norms, the relative
    difference of the gradients and our clip fraction. ``zero_advantages``: every group scored alike (the KL term
    alone). ``off_policy``: the behaviour log-probs are the live ones plus N(0, off_policy) noise, as on a reused
    batch, so the ratio leaves 1 and the clip acts. ``ours`` overrides our config (a deliberately wrong one)."""
    import torch

    from stateset_plugins.models.backend import completion_logprobs
    from stateset_plugins.trainers.objectives import get_objective

    our_config, trl_settings = OBJECTIVES[objective]
    model = trainer.model
    inputs = dict(out)
    if zero_advantages:
        inputs["advantages"] = torch.zeros_like(out["advantages"])
    batch = our_batch(out, inputs["advantages"], model, group)
    mask = batch.completion_mask
    if off_policy:
        noise = torch.randn(mask.shape, generator=torch.Generator().manual_seed(seed)) * off_policy
        batch.behaviour_logp = batch.behaviour_logp + noise * mask
    if off_policy:  # else TRL takes its live log-probs, detached, as on a fresh batch
        inputs["old_per_token_logps"] = batch.behaviour_logp
    inputs["num_items_in_batch"] = mask.sum()
    for name, value in trl_settings.items():
        setattr(trainer, name, value)
    model.zero_grad(set_to_none=True)
    theirs = trainer.compute_loss(model, inputs)
    theirs.backward()
    g_theirs = _grads(model)
    obj = get_objective(objective)
    loss, stats = obj.loss(completion_logprobs(model, batch, 1.0), batch, obj.Config(**{**our_config, **(ours or {})}))
    loss.backward()
    g_ours = _grads(model)
    return {"trl_loss": float(theirs.detach()), "our_loss": float(loss.detach()),
            "trl_grad_norm": float(g_theirs.norm()), "our_grad_norm": float(g_ours.norm()),
            "grad_relative_difference": float((g_ours - g_theirs).norm() / g_theirs.norm().clamp(min=1e-30)),
            "clip_fraction": stats.get("clip_fraction", 0.0)}


def compare_inputs(trainer, out, rewards, *, group: int = 4) -> dict:
    """Our advantages (population and sample std) and reference log-probs against TRL's."""
    from stateset_plugins.trainers.objectives.common import group_advantages

    batch = our_batch(out, out["advantages"], trainer.model, group)
    on = batch.completion_mask > 0
    return {"sample_std_advantage_max_difference":
            float((group_advantages(rewards, group, unbiased=True) - out["advantages"]).abs().max()),
            "population_std_advantage_max_difference":
            float((group_advantages(rewards, group) - out["advantages"]).abs().max()),
            "reference_logp_max_difference": float((batch.ref_logp[on] - out["ref_per_token_logps"][on]).abs().max())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model directory (default: the offline SmolLM2-135M-Instruct)")
    args = parser.parse_args(argv)
    import torch

    import trl

    torch.set_num_threads(1)
    model_dir = args.model
    if model_dir is None:
        from stateset_plugins.models.loading import convert_gguf, default_gguf

        model_dir = str(convert_gguf(default_gguf())[0])  # converted once, then cached
    trainer, out, rewards = trl_batch(model_dir)
    result = {"model": model_dir, "trl": trl.__version__, "prompts": PROMPTS, "group": 4, "max_new_tokens": 16,
              "dtype": "float32", "lora": "r 8, alpha 16, all-linear, lora_B drawn from N(0, 0.02)", "beta": 0.04,
              "prompt_tokens": out["prompt_mask"].sum(1).tolist(),
              "completion_tokens": out["completion_mask"].sum(1).tolist(),
              **compare_inputs(trainer, out, rewards),
              "policy_gradient_batch": compare_update(trainer, out),
              "kl_only_batch": compare_update(trainer, out, zero_advantages=True),
              # a reused batch (behaviour log-probs off by N(0, 0.3) per token): the ratio leaves 1, the clip acts
              "off_policy": {name: compare_update(trainer, out, objective=name, off_policy=0.3) for name in OBJECTIVES}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    tmp = RESULTS.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(RESULTS)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
