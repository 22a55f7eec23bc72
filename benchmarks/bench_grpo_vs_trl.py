"""Our GRPO vs TRL's GRPOTrainer on the same tiny model, prompts, reward, G, lengths, lr, loss type, beta, clipping.

Each (implementation, seed) runs in its own process, so peak RSS is that run's; runs are interleaved (ours, TRL,
TRL, ours, ...) so drift on a shared machine hits both. Reports median step time (first WARMUP steps dropped) with
its generation/update split, rollout tokens/s, peak RSS and each reward curve; writes
benchmarks/results/grpo_vs_trl.json and prints the ratio. Usage: python benchmarks/bench_grpo_vs_trl.py [--seeds 3]
[--steps 20]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "training"))  # the tiny model builder and toy reward the tests use

SETTINGS = {"prompts_per_step": 2, "num_generations": 4, "max_new_tokens": 16, "learning_rate": 2e-2, "beta": 0.04,
            "epsilon": 0.2, "loss_type": "grpo (sequence mean, then batch mean)", "temperature": 1.0,
            "lora_r": 8, "lora_alpha": 16, "lr_schedule": "constant", "threads": 1}
PROMPTS = ["say a number", "what is 2 + 3", "my order A1 has not arrived", "please refund order 42", "hello",
           "thanks"]
WARMUP = 2


def digit_share(text: str) -> float:
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_ours(model_dir: str, seed: int, steps: int) -> dict:
    from toy_rewards import DigitReward
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stateset_agents import GRPOTrainer

    rows = [{"prompt": [{"role": "user", "content": p}], "completion": {"role": "assistant", "content": "x"}}
            for p in PROMPTS]
    config = {"steps": steps, "batch_size": SETTINGS["prompts_per_step"], "seed": seed,
              "num_generations": SETTINGS["num_generations"], "max_new_tokens": SETTINGS["max_new_tokens"],
              "learning_rate": SETTINGS["learning_rate"], "beta": SETTINGS["beta"], "epsilon": SETTINGS["epsilon"],
              "temperature": SETTINGS["temperature"], "lora_r": SETTINGS["lora_r"],
              "lora_alpha": SETTINGS["lora_alpha"]}
    trainer = GRPOTrainer(AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir),
                          reward=DigitReward(), dataset=rows, config=config)
    metrics = [e["metrics"] for e in trainer.events() if e["type"] == "metrics"]
    return {"step_time": [m["step_time"] for m in metrics], "generation_time": [m["generation_time"] for m in metrics],
            "update_time": [m["step_time"] - m["generation_time"] for m in metrics],
            "tokens": [m["rollout_tokens"] for m in metrics], "reward": [m["reward_mean"] for m in metrics]}


def run_trl(model_dir: str, seed: int, steps: int) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    g = SETTINGS["num_generations"]
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS * 20])

    def reward(prompts, completions, **_):
        return [digit_share(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=SETTINGS["prompts_per_step"] * g,
                      num_generations=g, max_completion_length=SETTINGS["max_new_tokens"],
                      learning_rate=SETTINGS["learning_rate"], lr_scheduler_type="constant", beta=SETTINGS["beta"],
                      epsilon=SETTINGS["epsilon"], loss_type="grpo", temperature=SETTINGS["temperature"], top_k=0,
                      top_p=1.0, max_steps=steps, logging_steps=1, report_to="none", seed=seed, use_cpu=True,
                      bf16=False, save_strategy="no", disable_tqdm=True)
    lora = LoraConfig(r=SETTINGS["lora_r"], lora_alpha=SETTINGS["lora_alpha"], lora_dropout=0.0,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward, args=args,
                          train_dataset=data, processing_class=AutoTokenizer.from_pretrained(model_dir),
                          peft_config=lora)
    gen_times: list[float] = []
    inner = trainer._generate_and_score_completions  # rollout + scoring, timed as "generation" like ours

    def timed(*a, **k):
        t0 = time.perf_counter()
        out = inner(*a, **k)
        gen_times.append(time.perf_counter() - t0)
        return out

    trainer._generate_and_score_completions = timed
    step_times: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_a, **_k):
            self.t0 = time.perf_counter()

        def on_step_end(self, *_a, **_k):
            step_times.append(time.perf_counter() - self.t0)

    trainer.add_callback(Clock())
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    tokens = [h["completions/mean_length"] * SETTINGS["prompts_per_step"] * g for h in logs]
    return {"step_time": step_times, "generation_time": gen_times[:len(step_times)],
            "update_time": [s - t for s, t in zip(step_times, gen_times)], "tokens": tokens,
            "reward": [h["reward"] for h in logs]}


def one(impl: str, model_dir: str, seed: int, steps: int) -> None:
    import torch

    torch.set_num_threads(SETTINGS["threads"])
    result = (run_ours if impl == "ours" else run_trl)(model_dir, seed, steps)
    result["peak_rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(result))


def summarise(runs: list[dict]) -> dict:
    steps = [t for r in runs for t in r["step_time"][WARMUP:]]
    gens = [t for r in runs for t in r["generation_time"][WARMUP:]]
    upd = [t for r in runs for t in r["update_time"][WARMUP:]]
    tok_s = [tok / g for r in runs for tok, g in zip(r["tokens"][WARMUP:], r["generation_time"][WARMUP:]) if g > 0]
    return {"median_step_s": statistics.median(steps), "median_generation_s": statistics.median(gens),
            "median_update_s": statistics.median(upd), "rollout_tokens_per_s": statistics.median(tok_s),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "reward_curves": [r["reward"] for r in runs],
            "final_reward_mean": statistics.fmean(statistics.fmean(r["reward"][-5:]) for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--one", nargs=3, metavar=("IMPL", "MODEL_DIR", "SEED"))
    args = parser.parse_args()
    if args.one:
        one(args.one[0], args.one[1], int(args.one[2]), args.steps)
        return
    from toy_rewards import build_tiny_model

    model_dir = Path(tempfile.mkdtemp()) / "tiny"
    build_tiny_model(model_dir)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    runs: dict[str, list[dict]] = {"ours": [], "trl": []}
    for seed in range(args.seeds):
        order = ("ours", "trl") if seed % 2 == 0 else ("trl", "ours")
        for impl in order:
            proc = subprocess.run([sys.executable, __file__, "--one", impl, str(model_dir), str(seed),
                                   "--steps", str(args.steps)], capture_output=True, text=True, env=env)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(f"{impl} seed {seed} failed:\n{proc.stderr[-3000:]}")
            runs[impl].append(json.loads(line[len("RESULT "):]))
            print(f"seed {seed} {impl}: median step {statistics.median(runs[impl][-1]['step_time'][WARMUP:]):.4f}s",
                  flush=True)
    ours, trl = summarise(runs["ours"]), summarise(runs["trl"])
    ratio = ours["median_step_s"] / trl["median_step_s"]
    from importlib.metadata import version

    result = {"settings": {**SETTINGS, "seeds": args.seeds, "steps": args.steps, "warmup_dropped": WARMUP},
              "versions": {p: version(p) for p in ("torch", "transformers", "trl", "peft")},
              "ours": ours, "trl": trl, "step_time_ratio_ours_over_trl": ratio, "target_ratio": 0.67,
              "meets_target": ratio <= 0.67}
    out = ROOT / "benchmarks" / "results" / "grpo_vs_trl.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    from stateset_agents.jsonio import write_json

    write_json(out, result)
    for name, s in (("ours", ours), ("trl", trl)):
        print(f"{name:5s} step {s['median_step_s'] * 1000:7.1f} ms  (generation {s['median_generation_s'] * 1000:6.1f}"
              f" / update {s['median_update_s'] * 1000:6.1f})  {s['rollout_tokens_per_s']:8.0f} tok/s  "
              f"peak RSS {s['peak_rss_mb']:6.0f} MB  final reward {s['final_reward_mean']:.3f}")
    print(f"step time ratio ours/TRL = {ratio:.2f} (target <= 0.67: {'met' if ratio <= 0.67 else 'NOT met'})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
