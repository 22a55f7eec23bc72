"""Our GRPO vs TRL's GRPOTrainer on the same model, prompts, reward, G, lengths, lr, loss type, beta, clipping.

Two model sizes: ``tiny`` (the tests' 2-layer random model) and ``135m`` (SmolLM2-135M: the cached converted
checkpoint in ~/.cache/stateset-agents/models/ when present, else a random model of its shape). Each (size,
implementation, seed) runs in its own process, so peak RSS is that run's; runs are interleaved (ours, TRL, TRL,
ours, ...) so drift on a shared machine hits both. Reports median step time (first WARMUP steps dropped), wall and
CPU (process time: what a loaded shared machine does not inflate), split into "generation" (rollout, grading and
reference log-probs: the scope of TRL's ``_generate_and_score_completions``) and "update" (forward-backward and
optimizer step), rollout tokens/s, peak RSS and each reward curve; writes benchmarks/results/grpo_vs_trl.json (one
entry per size; a size not run keeps its previous entry) and prints the ratios.
Usage: python benchmarks/bench_grpo_vs_trl.py [--sizes tiny,135m] [--seeds 3] [--steps 20]
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

SETTINGS = {"prompts_per_step": 2, "num_generations": 4, "max_new_tokens": 16, "learning_rate": 2e-2, "beta": 0.04,
            "epsilon": 0.2, "loss_type": "grpo (sequence mean, then batch mean)", "temperature": 1.0,
            "lora_r": 8, "lora_alpha": 16, "lr_schedule": "constant", "threads": 1}
PROMPTS = ["say a number", "what is 2 + 3", "my order A1 has not arrived", "please refund order 42", "hello",
           "thanks"]
WARMUP = 2
# the target of issue 4: our step time over TRL's, per size
TARGETS = {"tiny": 0.67, "135m": 1.0}
SMOLLM2_135M = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                "intermediate_size": 1536, "tie_word_embeddings": True}


def digit_share(text: str) -> float:
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu() -> float:
    return time.process_time()


def run_ours(model_dir: str, seed: int, steps: int) -> dict:
    from algorithms import DigitReward  # the matrix's task reward (a sibling script: this directory is sys.path[0])
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stateset_agents import GRPOTrainer
    from stateset_plugins.trainers.engine import Engine

    gen_wall: list[float] = []
    gen_cpu: list[float] = []
    make_batch = Engine._make_batch  # rollout + grading + reference log-probs: TRL's _generate_and_score scope

    def timed(self):
        t0, c0 = time.perf_counter(), cpu()
        out = make_batch(self)
        gen_wall.append(time.perf_counter() - t0)
        gen_cpu.append(cpu() - c0)
        return out

    Engine._make_batch = timed

    rows = [{"prompt": [{"role": "user", "content": p}], "completion": {"role": "assistant", "content": "x"}}
            for p in PROMPTS]
    config = {"steps": steps, "batch_size": SETTINGS["prompts_per_step"], "seed": seed,
              "num_generations": SETTINGS["num_generations"], "max_new_tokens": SETTINGS["max_new_tokens"],
              "learning_rate": SETTINGS["learning_rate"], "beta": SETTINGS["beta"], "epsilon": SETTINGS["epsilon"],
              "temperature": SETTINGS["temperature"], "lora_r": SETTINGS["lora_r"],
              "lora_alpha": SETTINGS["lora_alpha"]}
    trainer = GRPOTrainer(AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir),
                          reward=DigitReward(), dataset=rows, config=config)
    metrics, step_cpu = [], []
    c0 = cpu()
    for e in trainer.events():  # no output directory: nothing but the steps runs between metrics events
        if e["type"] == "metrics":
            metrics.append(e["metrics"])
            step_cpu.append(cpu() - c0)
            c0 = cpu()
    step_wall = [m["step_time"] for m in metrics]
    return {"step_time": step_wall, "generation_time": gen_wall[:len(metrics)],
            "update_time": [s - g for s, g in zip(step_wall, gen_wall)],
            "step_cpu": step_cpu, "generation_cpu": gen_cpu[:len(metrics)],
            "update_cpu": [s - g for s, g in zip(step_cpu, gen_cpu)],
            "rollout_time": [m["generation_time"] for m in metrics],
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
    gen_cpu: list[float] = []
    inner = trainer._generate_and_score_completions  # rollout + scoring, timed as "generation" like ours

    def timed(*a, **k):
        t0, c0 = time.perf_counter(), cpu()
        out = inner(*a, **k)
        gen_times.append(time.perf_counter() - t0)
        gen_cpu.append(cpu() - c0)
        return out

    trainer._generate_and_score_completions = timed
    step_times: list[float] = []
    step_cpu: list[float] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, *_a, **_k):
            self.t0, self.c0 = time.perf_counter(), cpu()

        def on_step_end(self, *_a, **_k):
            step_times.append(time.perf_counter() - self.t0)
            step_cpu.append(cpu() - self.c0)

    trainer.add_callback(Clock())
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    tokens = [h["completions/mean_length"] * SETTINGS["prompts_per_step"] * g for h in logs]
    return {"step_time": step_times, "generation_time": gen_times[:len(step_times)],
            "update_time": [s - t for s, t in zip(step_times, gen_times)], "step_cpu": step_cpu,
            "generation_cpu": gen_cpu[:len(step_cpu)], "update_cpu": [s - t for s, t in zip(step_cpu, gen_cpu)],
            "tokens": tokens,
            "reward": [h["reward"] for h in logs]}


def one(impl: str, model_dir: str, seed: int, steps: int) -> None:
    import torch

    torch.set_num_threads(SETTINGS["threads"])
    result = (run_ours if impl == "ours" else run_trl)(model_dir, seed, steps)
    result["peak_rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(result))


def summarise(runs: list[dict]) -> dict:
    def med(key: str) -> float:
        return statistics.median(t for r in runs for t in r[key][WARMUP:])

    tok_s = [tok / g for r in runs  # tokens over sampling time (ours: the rollout alone)
             for tok, g in zip(r["tokens"][WARMUP:], r.get("rollout_time", r["generation_time"])[WARMUP:]) if g > 0]
    return {"median_step_s": med("step_time"), "median_generation_s": med("generation_time"),
            "median_update_s": med("update_time"), "median_step_cpu_s": med("step_cpu"),
            "median_generation_cpu_s": med("generation_cpu"), "median_update_cpu_s": med("update_cpu"),
            "rollout_tokens_per_s": statistics.median(tok_s),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "reward_curves": [r["reward"] for r in runs],
            "final_reward_mean": statistics.fmean(statistics.fmean(r["reward"][-5:]) for r in runs)}


def smollm2_135m_dir(tmp: Path) -> tuple[Path, str]:
    """The cached converted SmolLM2-135M when there is one, else a random model of its shape (tiny tokenizer)."""
    cache = Path.home() / ".cache" / "stateset-agents" / "models"
    for config in sorted(cache.glob("*/config.json")):
        got = json.loads(config.read_text())
        if all(got.get(k) == v for k, v in SMOLLM2_135M.items()) and (config.parent / "model.safetensors").exists():
            return config.parent, "cached SmolLM2-135M checkpoint"
    import torch
    from stateset_plugins.models.tiny import build_tiny_model
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    path = build_tiny_model(tmp / "smollm2-135m-shape", vocab_size=2048)
    config = AutoConfig.from_pretrained(path)
    for k, v in {**SMOLLM2_135M, "initializer_range": 0.02, "vocab_size": len(AutoTokenizer.from_pretrained(path)),
                 "head_dim": 64}.items():
        setattr(config, k, v)
    torch.manual_seed(1234)
    LlamaForCausalLM(config).save_pretrained(path)
    return path, "random model of SmolLM2-135M's shape"


def bench_size(size: str, model_dir: Path, seeds: int, steps: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    runs: dict[str, list[dict]] = {"ours": [], "trl": []}
    for seed in range(seeds):
        order = ("ours", "trl") if seed % 2 == 0 else ("trl", "ours")
        for impl in order:
            proc = subprocess.run([sys.executable, __file__, "--one", impl, str(model_dir), str(seed),
                                   "--steps", str(steps)], capture_output=True, text=True, env=env)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(f"{size} {impl} seed {seed} failed:\n{proc.stderr[-3000:]}")
            runs[impl].append(json.loads(line[len("RESULT "):]))
            run = runs[impl][-1]
            print(f"{size} seed {seed} {impl}: median step {statistics.median(run['step_time'][WARMUP:]):.4f}s "
                  f"(CPU {statistics.median(run['step_cpu'][WARMUP:]):.4f}s)", flush=True)
    ours, trl = summarise(runs["ours"]), summarise(runs["trl"])
    ratio = ours["median_step_s"] / trl["median_step_s"]
    cpu_ratio = ours["median_step_cpu_s"] / trl["median_step_cpu_s"]
    target = TARGETS[size]
    return {"seeds": seeds, "steps": steps, "ours": ours, "trl": trl, "step_time_ratio_ours_over_trl": ratio,
            "step_cpu_ratio_ours_over_trl": cpu_ratio, "target_ratio": target,
            "meets_target": ratio <= target and cpu_ratio <= target}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="tiny,135m", help="comma-separated: tiny, 135m")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--one", nargs=3, metavar=("IMPL", "MODEL_DIR", "SEED"))
    args = parser.parse_args()
    if args.one:
        one(args.one[0], args.one[1], int(args.one[2]), args.steps)
        return
    from stateset_plugins.models.tiny import build_tiny_model

    out = ROOT / "benchmarks" / "results" / "grpo_vs_trl.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    sizes = dict(previous.get("sizes", {}))
    tmp = Path(tempfile.mkdtemp())
    for size in [x.strip() for x in args.sizes.split(",") if x.strip()]:
        if size == "tiny":
            model_dir, model = build_tiny_model(tmp / "tiny"), "tests' tiny random model (2 layers, hidden 32)"
        elif size == "135m":
            model_dir, model = smollm2_135m_dir(tmp)
        else:
            raise SystemExit(f"unknown size {size!r} (tiny, 135m)")
        sizes[size] = {"model": model, **bench_size(size, model_dir, args.seeds, args.steps)}
    from importlib.metadata import version

    result = {"settings": {**SETTINGS, "warmup_dropped": WARMUP,
                           "generation_scope": "rollout + grading + reference log-probs (TRL: "
                                               "_generate_and_score_completions); update: the rest of the step"},
              "versions": {p: version(p) for p in ("torch", "transformers", "trl", "peft")}, "sizes": sizes}
    out.parent.mkdir(parents=True, exist_ok=True)
    from stateset_agents.core.jsonio import write_json

    write_json(out, result)
    for size, r in sizes.items():
        for name in ("ours", "trl"):
            s = r[name]
            print(f"{size:5s} {name:5s} step {s['median_step_s'] * 1000:8.1f} ms wall / "
                  f"{s['median_step_cpu_s'] * 1000:8.1f} ms CPU  (generation {s['median_generation_s'] * 1000:7.1f}"
                  f" / update {s['median_update_s'] * 1000:7.1f} wall)  {s['rollout_tokens_per_s']:7.0f} tok/s  "
                  f"peak RSS {s['peak_rss_mb']:5.0f} MB  final reward {s['final_reward_mean']:.3f}")
        print(f"{size:5s} step time ratio ours/TRL = {r['step_time_ratio_ours_over_trl']:.2f} wall, "
              f"{r['step_cpu_ratio_ours_over_trl']:.2f} CPU (target <= {r['target_ratio']}: "
              f"{'met' if r['meets_target'] else 'NOT met'})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
