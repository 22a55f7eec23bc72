"""Our GRPO vs TRL's GRPOTrainer at equal config: the same model, prompts, reward, G, lengths, lr, loss, beta, clip.

Every setting either side could differ in is set equal and written into the results file (`equal_config`), or,
where it cannot be set equal, written there with both values (`differences`). Rows: gradient checkpointing off on
both and on on both (``--checkpointing off,on``); ``--num-iterations`` / ``--minibatches`` set TRL's
``num_iterations`` / ``steps_per_generation`` and ours alike (a step is one optimizer step on both sides).
Tokens generated and trained per step are counted on each side (completion tokens, EOS included; TRL's from its
``completion_mask``), and times are reported per step, per generated token and per trained token with the same
denominators (the timed steps' total wall time over their tokens). The machine's memory bandwidth is measured in
the same run and our rollout tokens/s reported as a share of ``bandwidth / bytes of weights x rows``.

Two model sizes: ``tiny`` (the tests' 2-layer random model) and ``135m`` (SmolLM2-135M: the cached converted
checkpoint in ~/.cache/stateset-agents/models/ when present, else a random model of its shape). Each (size,
implementation, seed) runs in its own process, so peak RSS is that run's; runs are interleaved (ours, TRL, TRL,
ours, ...) so drift on a shared machine hits both. Reports median step time (first WARMUP steps dropped), wall and
CPU (process time: what a loaded shared machine does not inflate), split into "generation" (rollout, grading and
reference log-probs: the scope of TRL's ``_generate_and_score_completions``) and "update" (forward-backward and
optimizer step), rollout tokens/s, peak RSS and each reward curve. A run that collapses (learns the task and loses
it, `collapsed`) generates other lengths than one that does not, so it is no baseline for speed: the judged ratios
pair the seeds where neither side collapsed (at least 2, or the row is not judged), the all-seeds ratios beside them; writes benchmarks/results/grpo_vs_trl.json (one
entry per size; a size not run keeps its previous entry) and prints the ratios.
Usage: python benchmarks/bench_grpo_vs_trl.py [--sizes tiny,135m] [--seeds 3] [--steps 20] [--checkpointing off,on]
       [--num-iterations 1] [--minibatches 1] [--threads 1] [--out benchmarks/results/grpo_vs_trl.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
from machine import bandwidth_share, peak_rss_mb, run_timed  # a sibling module: this directory is sys.path[0]

# lr 5e-3: at 2e-2 both sides' runs collapsed to reward 0 after a run of zero-advantage batches (AdamW turns the small
# KL-only gradient into a full step), ours for good on 3 of 3 seeds; a run that collapses is no baseline for speed
SETTINGS = {"prompts_per_step": 2, "num_generations": 4, "max_new_tokens": 16, "learning_rate": 5e-3, "beta": 0.04,
            "epsilon": 0.2, "loss_type": "grpo (sequence mean, then batch mean)", "temperature": 1.0,
            "lora_r": 8, "lora_alpha": 16, "lr_schedule": "constant", "threads": 1, "num_iterations": 1,
            "minibatches": 1, "gradient_checkpointing": False, "rollout_dtype": "float32"}
#: What both sides run with, as each side names it (the file records it; `run_ours`/`run_trl` pass exactly these).
EQUAL = {
    "kl_estimator": "k3 (exp(ref - new) - (ref - new) - 1) per token, beta x KL added to the per-token loss; "
                    "TRL use_bias_correction_kl=False (ours has no bias correction)",
    "advantages": "group-relative (r - mean) / (std + 1e-4), the Bessel-corrected (n - 1) std within each group "
                  "(TRL scale_rewards='group'; ours advantage_std='sample')",
    "loss_aggregation": "per-sequence token mean, then mean over the batch (TRL loss_type='grpo'; ours GRPO)",
    "clipping": "token-level ratio, clip(1 - eps, 1 + eps), eps 0.2 (TRL epsilon_high=None, delta=None, "
                "importance_sampling_level='token')",
    "reuse": "num_iterations passes x minibatches optimizer steps per rollout batch (TRL num_iterations, "
             "steps_per_generation); a step is one optimizer step on both sides",
    "generation": "multinomial sampling at temperature 1.0, top_k 0, top_p 1.0, no repetition penalty, "
                  "max_new_tokens 16, stop at EOS; truncated completions are trained (TRL "
                  "mask_truncated_completions=False)",
    "lora": "r 8, alpha 16, dropout 0, all linear layers of the decoder (PEFT 'all-linear')",
    "dtype": "float32 weights and compute on CPU (TRL bf16=False, fp16=False)",
    "optimizer": "torch.optim.AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0), max grad norm 1.0, constant lr, "
                 "no warmup (TRL optim='adamw_torch', not the fused default)",
    "threads": "torch.set_num_threads(threads) and OMP_NUM_THREADS in each run's own process",
    "entropy": "no entropy bonus, every token trained (TRL top_entropy_quantile=1.0)",
}
#: What cannot be set equal from either side's public options: both values, and what it changes.
DIFFERENCES = {
    "behaviour_logprobs": "ours records them while sampling; TRL with num_iterations > 1 scores them in an extra "
                          "forward pass (inside its generate-and-score phase, so timed there)",
    "rollout_dtype": "rows named 'ours rollout bfloat16' (equal_config false): ours samples from a bfloat16 copy of "
                     "the weights and trains in float32 with the truncated importance correction (cap 2); TRL samples "
                     "and trains in float32. Reported beside the equal-config rows, never judged on their target",
}
PROMPTS = ["say a number", "what is 2 + 3", "my order A1 has not arrived", "please refund order 42", "hello",
           "thanks"]
WARMUP = 2
# the targets of issues 4 and 19: our step time over TRL's at equal config, per size
TARGETS = {"tiny": 0.67, "135m": 0.6}
VERDICT = {True: "met", False: "NOT met", None: "not judged: not equal config"}
SMOLLM2_135M = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
                "intermediate_size": 1536, "tie_word_embeddings": True}


def digit_share(text: str) -> float:
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


def cpu() -> float:
    return time.process_time()


def run_ours(model_dir: str, seed: int, steps: int, settings: dict) -> dict:
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
    per = settings["num_iterations"] * settings["minibatches"]
    config = {"steps": steps, "batch_size": settings["prompts_per_step"], "seed": seed,
              "num_generations": settings["num_generations"], "max_new_tokens": settings["max_new_tokens"],
              "learning_rate": settings["learning_rate"], "beta": settings["beta"], "epsilon": settings["epsilon"],
              "temperature": settings["temperature"], "lora_r": settings["lora_r"],
              "lora_alpha": settings["lora_alpha"], "num_iterations": settings["num_iterations"],
              "minibatches": settings["minibatches"], "save_every": per, "advantage_std": "sample",
              "gradient_checkpointing": settings["gradient_checkpointing"], "rollout_dtype": settings["rollout_dtype"]}
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
    firsts = [i for i, m in enumerate(metrics) if "reward_mean" in m]  # the first step of each rollout batch
    gen_per_step = [0.0] * len(metrics)
    gen_cpu_per_step = [0.0] * len(metrics)
    for i, g, c in zip(firsts, gen_wall, gen_cpu):
        gen_per_step[i], gen_cpu_per_step[i] = g, c
    from machine import weight_bytes

    return {"step_time": step_wall, "generation_time": gen_per_step,
            "update_time": [s - g for s, g in zip(step_wall, gen_per_step)],
            "step_cpu": step_cpu, "generation_cpu": gen_cpu_per_step,
            "update_cpu": [s - g for s, g in zip(step_cpu, gen_cpu_per_step)],
            "rollout_time": [m.get("generation_time", 0.0) for m in metrics],
            "generated_tokens": [m.get("rollout_tokens", 0) for m in metrics],
            "trained_tokens": [m["trained_tokens"] for m in metrics],
            "clip_fraction": [m.get("clip_fraction") for m in metrics],
            "approx_kl": [m.get("approx_kl") for m in metrics],
            "reward": [metrics[i]["reward_mean"] for i in firsts],
            # the bytes a decoding step reads: the sampler's copy's (bfloat16: 2 per weight)
            "weight_bytes": weight_bytes(trainer.backend.model, 2 if settings["rollout_dtype"] == "bfloat16" else None),
            "sampler_logp_abs_diff_mean": [m.get(f"{settings['rollout_dtype']}_logp_abs_diff_mean") for m in metrics],
            "tis_weight_mean": [m.get("tis_weight_mean") for m in metrics]}


def run_trl(model_dir: str, seed: int, steps: int, settings: dict) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    g = settings["num_generations"]
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": p}]} for p in PROMPTS * 20])

    def reward(prompts, completions, **_):
        return [digit_share(c[0]["content"] if isinstance(c, list) else c) for c in completions]

    rows = settings["prompts_per_step"] * g
    if rows % settings["minibatches"]:
        raise SystemExit(f"{rows} rows do not split into {settings['minibatches']} minibatches")
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=rows // settings["minibatches"],
                      steps_per_generation=settings["minibatches"], num_iterations=settings["num_iterations"],
                      num_generations=g, max_completion_length=settings["max_new_tokens"],
                      learning_rate=settings["learning_rate"], lr_scheduler_type="constant", warmup_steps=0,
                      beta=settings["beta"], epsilon=settings["epsilon"], epsilon_high=None, delta=None,
                      importance_sampling_level="token", scale_rewards="group", loss_type="grpo",
                      use_bias_correction_kl=False, mask_truncated_completions=False, top_entropy_quantile=1.0,
                      temperature=settings["temperature"], top_k=0, top_p=1.0, repetition_penalty=1.0,
                      gradient_checkpointing=settings["gradient_checkpointing"], optim="adamw_torch",
                      weight_decay=0.0, max_grad_norm=1.0, max_steps=steps, logging_steps=1, report_to="none",
                      seed=seed, use_cpu=True, bf16=False, fp16=False, save_strategy="no", disable_tqdm=True)
    lora = LoraConfig(r=settings["lora_r"], lora_alpha=settings["lora_alpha"], lora_dropout=0.0,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), reward_funcs=reward, args=args,
                          train_dataset=data, processing_class=AutoTokenizer.from_pretrained(model_dir),
                          peft_config=lora)
    gen_events: list[tuple[int, float, float, int]] = []  # (step index, wall, CPU, completion tokens)
    rewards: list[float] = []
    inner = trainer._generate_and_score_completions  # rollout + scoring, timed as "generation" like ours

    def timed(*a, **k):
        t0, c0 = time.perf_counter(), cpu()
        out = inner(*a, **k)
        gen_events.append((len(step_times), time.perf_counter() - t0, cpu() - c0, int(out["completion_mask"].sum())))
        rewards.append(float(trainer._metrics["train"]["reward"][-1]))  # this rollout batch's mean reward
        return out

    trainer._generate_and_score_completions = timed
    step_times: list[float] = []
    step_cpu: list[float] = []
    trained = run_timed(trainer, lambda inputs: inputs["completion_mask"].sum(), step_times, step_cpu)
    n = len(step_times)
    gen, gcpu, tokens = [0.0] * n, [0.0] * n, [0] * n
    for i, wall, c, tok in gen_events:
        if i < n:
            gen[i], gcpu[i], tokens[i] = wall, c, tok
    from machine import weight_bytes

    return {"step_time": step_times, "generation_time": gen, "update_time": [s - t for s, t in zip(step_times, gen)],
            "step_cpu": step_cpu, "generation_cpu": gcpu, "update_cpu": [s - t for s, t in zip(step_cpu, gcpu)],
            "generated_tokens": tokens, "trained_tokens": trained[:n],
            "clip_fraction": [h.get("clip_ratio/region_mean") for h in trainer.state.log_history if "loss" in h],
            "reward": rewards,
            "weight_bytes": weight_bytes(trainer.model)}


def one(impl: str, model_dir: str, seed: int, steps: int, settings: dict) -> None:
    import torch

    torch.set_num_threads(settings["threads"])
    result = (run_ours if impl == "ours" else run_trl)(model_dir, seed, steps, settings)
    result["peak_rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(result))


def summarise(runs: list[dict], warmup: int) -> dict:
    def med(key: str) -> float:
        return statistics.median(t for r in runs for t in r[key][warmup:])

    def total(key: str) -> float:
        return sum(sum(r[key][warmup:]) for r in runs)

    wall, generated, trained = total("step_time"), total("generated_tokens"), total("trained_tokens")
    gen_time = total("generation_time")
    out = {"median_step_s": med("step_time"), "median_generation_s": med("generation_time"),
           "median_update_s": med("update_time"), "median_step_cpu_s": med("step_cpu"),
           "median_generation_cpu_s": med("generation_cpu"), "median_update_cpu_s": med("update_cpu"),
           "timed_steps": sum(len(r["step_time"][warmup:]) for r in runs),
           "generated_tokens_per_step": generated / max(sum(len(r["step_time"][warmup:]) for r in runs), 1),
           "trained_tokens_per_step": trained / max(sum(len(r["step_time"][warmup:]) for r in runs), 1),
           "s_per_generated_token": wall / max(generated, 1), "s_per_trained_token": wall / max(trained, 1),
           # the same scope on both sides: generated tokens over the generate-and-score phase
           "generation_phase_tokens_per_s": generated / max(gen_time, 1e-9),
           "peak_rss_mb": max(r["peak_rss_mb"] for r in runs), "weight_bytes": runs[0]["weight_bytes"],
           "reward_curves": [r["reward"] for r in runs], "clip_fraction_curves": [r["clip_fraction"] for r in runs],
           **({"sampler_logp_abs_diff_mean_curves": [r["sampler_logp_abs_diff_mean"] for r in runs],
               "tis_weight_mean_curves": [r["tis_weight_mean"] for r in runs]} if "tis_weight_mean" in runs[0] else {}),
           "final_reward_mean": statistics.fmean(statistics.fmean(r["reward"][-5:]) for r in runs)}
    if "rollout_time" in runs[0]:  # ours: sampling alone (the bandwidth-bound part)
        rollout = total("rollout_time")
        out["rollout_tokens_per_s"] = generated / max(rollout, 1e-9)
        out["approx_kl_curves"] = [r["approx_kl"] for r in runs]
    return out


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


def bench_size(size: str, model_dir: Path, seeds: int, steps: int, settings: dict) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(settings["threads"]), "TOKENIZERS_PARALLELISM": "false"}
    per = settings["num_iterations"] * settings["minibatches"]
    warmup = -(-WARMUP // per) * per  # whole rollout batches
    if steps % per or steps <= warmup:
        raise SystemExit(f"--steps {steps} must be a multiple of num_iterations x minibatches = {per} and more than "
                         f"the {warmup} warm-up steps")
    runs: dict[str, list[dict]] = {"ours": [], "trl": []}
    for seed in range(seeds):
        order = ("ours", "trl") if seed % 2 == 0 else ("trl", "ours")
        for impl in order:  # interleaved: drift on a shared machine hits both sides
            proc = subprocess.run([sys.executable, __file__, "--one", impl, str(model_dir), str(seed),
                                   "--steps", str(steps), "--settings", json.dumps(settings)],
                                  capture_output=True, text=True, env=env)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(f"{size} {impl} seed {seed} failed:\n{proc.stderr[-3000:]}")
            runs[impl].append(json.loads(line[len("RESULT "):]))
            run = runs[impl][-1]
            print(f"{size} seed {seed} {impl}: median step {statistics.median(run['step_time'][warmup:]):.4f}s "
                  f"(CPU {statistics.median(run['step_cpu'][warmup:]):.4f}s)", flush=True)
    ours, trl = summarise(runs["ours"], warmup), summarise(runs["trl"], warmup)
    # a run that collapses generates other lengths than one that does not: no baseline for speed. The ratios that
    # are judged pair the seeds where neither side collapsed; the all-seeds ratios are reported beside them
    fell = {impl: [seed for seed, run in enumerate(runs[impl]) if collapsed(run["reward"])] for impl in runs}
    kept = [seed for seed in range(seeds) if seed not in fell["ours"] and seed not in fell["trl"]]
    judged = ratios(summarise([runs["ours"][s] for s in kept], warmup),
                    summarise([runs["trl"][s] for s in kept], warmup)) if kept else {}
    target = TARGETS[size]
    equal = settings["rollout_dtype"] == "float32"  # TRL has no sampler in another precision than its model's
    meets = None
    if equal and len(kept) >= 2:
        meets = judged["step_time_ratio_ours_over_trl"] <= target and judged["step_cpu_ratio_ours_over_trl"] <= target
    return {"seeds": seeds, "steps": steps, "warmup_dropped": warmup, "ours": ours, "trl": trl,
            "equal_config": equal, "collapsed_seeds": fell, "judged_seeds": kept, **judged,
            "all_seeds": ratios(ours, trl),
            # a row that is not at equal config, or with fewer than 2 seeds where neither side collapsed, is
            # reported, never judged against the target
            "target_ratio": target, "meets_target": meets}


def ratios(ours: dict, trl: dict) -> dict:
    return {"step_time_ratio_ours_over_trl": ours["median_step_s"] / trl["median_step_s"],
            "step_cpu_ratio_ours_over_trl": ours["median_step_cpu_s"] / trl["median_step_cpu_s"],
            "per_generated_token_ratio": ours["s_per_generated_token"] / trl["s_per_generated_token"],
            "per_trained_token_ratio": ours["s_per_trained_token"] / trl["s_per_trained_token"]}


def collapsed(rewards: list[float]) -> bool:
    """A run that learned the task (a 3-batch mean reward >= 0.5) and lost it (its last quarter's mean reward
    under half that best): its late steps generate other lengths than a run that kept it."""
    best = max((statistics.fmean(rewards[i:i + 3]) for i in range(max(len(rewards) - 2, 1))), default=0.0)
    tail = rewards[-max(len(rewards) // 4, 1):]
    return best >= 0.5 and statistics.fmean(tail) < 0.5 * best


def measure_bandwidth() -> dict:
    """`machine.copy_bandwidth` in its own process: its 2 GB of arrays would otherwise count in every run's peak
    RSS (a child inherits its parent's ru_maxrss)."""
    code = "import json, machine; print(json.dumps(machine.copy_bandwidth()))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=str(Path(__file__).resolve().parent))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="tiny,135m", help="comma-separated: tiny, 135m")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checkpointing", default="off,on", help="gradient checkpointing rows: off, on or off,on")
    parser.add_argument("--num-iterations", type=int, default=1)
    parser.add_argument("--minibatches", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rollout-dtype", default="float32",
                        help="our sampler's precision rows: float32 (equal config), bfloat16 (ours only: not equal)")
    parser.add_argument("--learning-rate", type=float, default=SETTINGS["learning_rate"])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "grpo_vs_trl.json"))
    parser.add_argument("--one", nargs=3, metavar=("IMPL", "MODEL_DIR", "SEED"))
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one[0], args.one[1], int(args.one[2]), args.steps, json.loads(args.settings))
        return
    from stateset_plugins.models.tiny import build_tiny_model

    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    rows = dict(previous.get("rows", {}))
    bandwidth = measure_bandwidth()
    tmp = Path(tempfile.mkdtemp())
    for size in [x.strip() for x in args.sizes.split(",") if x.strip()]:
        if size == "tiny":
            model_dir, model = build_tiny_model(tmp / "tiny"), "tests' tiny random model (2 layers, hidden 32)"
        elif size == "135m":
            model_dir, model = smollm2_135m_dir(tmp)
        else:
            raise SystemExit(f"unknown size {size!r} (tiny, 135m)")
        variants = [(c.strip(), d.strip()) for c in args.checkpointing.split(",") if c.strip()
                    for d in args.rollout_dtype.split(",") if d.strip()]
        for ckpt, dtype in variants:
            if ckpt not in ("off", "on"):
                raise SystemExit(f"--checkpointing takes off and/or on, got {ckpt!r}")
            if dtype not in ("float32", "bfloat16"):
                raise SystemExit(f"--rollout-dtype takes float32 and/or bfloat16, got {dtype!r}")
            settings = {**SETTINGS, "gradient_checkpointing": ckpt == "on", "threads": args.threads,
                        "num_iterations": args.num_iterations, "minibatches": args.minibatches,
                        "learning_rate": args.learning_rate, "rollout_dtype": dtype}
            key = f"{size} checkpointing {ckpt} mu {args.num_iterations} minibatches {args.minibatches}" + \
                ("" if dtype == "float32" else f" ours rollout {dtype}")
            row = {"model": model, "settings": settings, **bench_size(size, model_dir, args.seeds, args.steps,
                                                                        settings)}
            rows_decoded = settings["prompts_per_step"] * settings["num_generations"]
            row["bandwidth_share"] = bandwidth_share(row["ours"]["rollout_tokens_per_s"], bandwidth["bytes_per_s"],
                                                     row["ours"]["weight_bytes"], rows_decoded)
            rows[key] = row
    from importlib.metadata import version

    result = {"equal_config": EQUAL, "differences": DIFFERENCES,
              "generation_scope": "rollout + grading + reference log-probs (TRL: _generate_and_score_completions); "
                                  "update: the rest of the step",
              "token_counts": "completion tokens (EOS included) per optimizer step; generated: those sampled for "
                              "the step's rollout batch (0 on reused steps), trained: those the step's loss covers",
              "machine": {"bandwidth": bandwidth, "cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg()},
              "versions": {p: version(p) for p in ("torch", "transformers", "trl", "peft")}, "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    from stateset_agents.core.jsonio import write_json

    write_json(out, result)
    for key, r in rows.items():
        for name in ("ours", "trl"):
            s = r[name]
            print(f"{key}: {name:4s} step {s['median_step_s'] * 1000:8.1f} ms wall / "
                  f"{s['median_step_cpu_s'] * 1000:8.1f} ms CPU (generation {s['median_generation_s'] * 1000:7.1f} / update "
                  f"{s['median_update_s'] * 1000:7.1f}) {s['generated_tokens_per_step']:.0f} generated / "
                  f"{s['trained_tokens_per_step']:.0f} trained tokens per step, peak RSS {s['peak_rss_mb']:5.0f} MB, "
                  f"final reward {s['final_reward_mean']:.3f}")
        if "judged_seeds" not in r:  # a row written before collapsed runs were set aside
            continue
        if not r["judged_seeds"]:
            print(f"{key}: every seed collapsed on one side or the other ({r['collapsed_seeds']}): not judged")
            continue
        print(f"{key}: seeds {r['judged_seeds']} (collapsed: {r['collapsed_seeds']}): "
              f"ratio ours/TRL {r['step_time_ratio_ours_over_trl']:.2f} per step wall, "
              f"{r['step_cpu_ratio_ours_over_trl']:.2f} CPU, {r['per_generated_token_ratio']:.2f} per generated "
              f"token, {r['per_trained_token_ratio']:.2f} per trained token (target <= {r['target_ratio']}: "
              f"{VERDICT[r['meets_target']]}); rollout at {r['bandwidth_share']['share']:.0%} of "
              "the bandwidth ceiling")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
