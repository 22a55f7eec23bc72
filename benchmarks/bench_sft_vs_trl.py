"""Our SFT vs TRL's SFTTrainer at equal config, on the curated rows of the sample support logs.

Both sides train on the same token sequences: TRL gets the rows pre-tokenized by our renderer (``input_ids`` and
``completion_mask``: its tokenizer and chat template never run), so the chat format, the prompt truncation and the
completion-only loss cover the same tokens. Same LoRA, batch, learning rate, optimizer, dtype, threads, packing
off, padding-free off, gradient checkpointing off on both (``--checkpointing on`` adds a row with it on on both).
Each side's data order comes from its own seeded sampler, so tokens per step differ: times are reported per step
and per trained token (the timed steps' total wall time over their tokens). Each (side, seed) runs in its own
process (peak RSS is that run's), interleaved so drift on a shared machine hits both. Writes
benchmarks/results/sft_vs_trl.json with every setting, both sides' loss curves and the ratios.

Usage: python benchmarks/bench_sft_vs_trl.py [--size 135m|tiny] [--seeds 3] [--steps 20] [--checkpointing off,on]
       [--threads 1] [--out benchmarks/results/sft_vs_trl.json]
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
from machine import peak_rss_mb, rss_mb, run_timed  # a sibling module: this directory is sys.path[0]

SETTINGS = {"batch_size": 4, "learning_rate": 1e-4, "lora_r": 8, "lora_alpha": 16, "max_prompt_tokens": 512,
            "threads": 1, "gradient_checkpointing": False}
EQUAL = {
    "data": "the curated rows of the sample support logs (ingest openai + improve tool_calling, as "
            "benchmarks/evidence.py prepares them), tokenized once by our ChatRenderer; TRL gets input_ids and "
            "completion_mask, so its tokenizer's chat template never runs",
    "max_length": "prompt: its last max_prompt_tokens tokens (our renderer's truncation), completion whole; TRL "
                  "max_length=None on the identical pre-tokenized rows",
    "loss": "completion-only token-mean NLL over the batch's completion tokens (TRL completion_only_loss=True, "
            "loss_type='nll'; ours sft)",
    "packing": "off on both (TRL packing=False, padding_free=False); rows padded to the batch's longest",
    "batch": "4 rows per optimizer step, no gradient accumulation",
    "lora": "r 8, alpha 16, dropout 0, all linear layers of the decoder (PEFT 'all-linear')",
    "optimizer": "torch.optim.AdamW (betas 0.9/0.999, eps 1e-8, weight decay 0), max grad norm 1.0, constant lr "
                 "1e-4, no warmup (TRL optim='adamw_torch')",
    "dtype": "float32 on CPU (TRL bf16=False)",
    "threads": "torch.set_num_threads(threads) and OMP_NUM_THREADS in each run's own process",
    "prompt_gradient": "ours prompt_gradient=True (the gradient flows through the prompt, as in TRL)",
}
DIFFERENCES = {
    "data_order": "each side's own seeded shuffle: different rows per step, hence per-trained-token times",
    "padding": "ours left-pads the prompt and right-pads the completion; TRL right-pads the row (same tokens)",
}
WARMUP = 2
TARGET = 0.8  # issue 19: our SFT step <= 0.8x TRL's at equal config


def curated_rows(work: Path) -> Path:
    """The sample logs curated as the quickstart does (cached in `work`)."""
    out = work / "improved" / "curated.jsonl"
    if out.exists():
        return out
    from evidence import REWARD

    from stateset_agents.pipeline.improve import run_improve
    from stateset_agents.pipeline.ingest import run_ingest
    from stateset_agents.pipeline.quickstart import sample_path

    run_ingest("openai", str(sample_path("support_logs.jsonl")), work / "ingested")
    run_improve(work / "ingested", REWARD, work / "improved", held_out_fraction=0.0)
    return out


def cpu() -> float:
    return time.process_time()


def run_ours(model_dir: str, data: str, seed: int, steps: int, settings: dict) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stateset_agents.training.sft_trainer import SFTTrainer

    config = {"steps": steps, "batch_size": settings["batch_size"], "seed": seed,
              "learning_rate": settings["learning_rate"], "lora_r": settings["lora_r"],
              "lora_alpha": settings["lora_alpha"], "max_prompt_tokens": settings["max_prompt_tokens"],
              "gradient_checkpointing": settings["gradient_checkpointing"], "save_every": steps}
    trainer = SFTTrainer(AutoModelForCausalLM.from_pretrained(model_dir), AutoTokenizer.from_pretrained(model_dir),
                         dataset=data, config=config)
    metrics, step_cpu = [], []
    c0 = cpu()
    for e in trainer.events():
        if e["type"] == "metrics":
            metrics.append(e["metrics"])
            step_cpu.append(cpu() - c0)
            c0 = cpu()
    return {"step_time": [m["step_time"] for m in metrics], "step_cpu": step_cpu,
            "trained_tokens": [m["trained_tokens"] for m in metrics], "loss": [m["loss"] for m in metrics]}


def tokenized(model_dir: str, data: str, settings: dict) -> list[dict]:
    from transformers import AutoTokenizer

    from stateset_agents.plugin_api.datasets import load_dataset
    from stateset_plugins.models.rendering import ChatRenderer

    renderer = ChatRenderer(AutoTokenizer.from_pretrained(model_dir), settings["max_prompt_tokens"])
    out = []
    for row in load_dataset(data).rows:  # exactly what our engine's SFT batch holds (`Engine._sft_batch`)
        prompt = renderer.prompt_ids(row["prompt"], row.get("tools"))
        completion = renderer.completion_ids(row["prompt"], row["completion"], row.get("tools"))
        out.append({"input_ids": prompt + completion, "completion_mask": [0] * len(prompt) + [1] * len(completion)})
    return out


def run_trl(model_dir: str, data: str, seed: int, steps: int, settings: dict) -> dict:
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=settings["batch_size"],
                     gradient_accumulation_steps=1, learning_rate=settings["learning_rate"],
                     lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", weight_decay=0.0,
                     max_grad_norm=1.0, max_length=None, packing=False, padding_free=False,
                     completion_only_loss=True, assistant_only_loss=False, loss_type="nll",
                     gradient_checkpointing=settings["gradient_checkpointing"], max_steps=steps, logging_steps=1,
                     report_to="none", seed=seed, use_cpu=True, bf16=False, fp16=False, save_strategy="no",
                     disable_tqdm=True, dataset_num_proc=None)
    lora = LoraConfig(r=settings["lora_r"], lora_alpha=settings["lora_alpha"], lora_dropout=0.0,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir), args=args,
                         train_dataset=Dataset.from_list(tokenized(model_dir, data, settings)),
                         processing_class=AutoTokenizer.from_pretrained(model_dir), peft_config=lora)
    step_times: list[float] = []
    step_cpu: list[float] = []
    # the completion tokens the loss covers
    trained = run_timed(trainer, lambda inputs: (inputs["labels"] != -100).sum(), step_times, step_cpu)
    return {"step_time": step_times, "step_cpu": step_cpu, "trained_tokens": trained[:len(step_times)],
            "loss": [h["loss"] for h in trainer.state.log_history if "loss" in h]}


def one(impl: str, model_dir: str, data: str, seed: int, steps: int, settings: dict) -> None:
    import torch

    torch.set_num_threads(settings["threads"])
    result = (run_ours if impl == "ours" else run_trl)(model_dir, data, seed, steps, settings)
    result.update(peak_rss_mb=peak_rss_mb(), rss_mb_at_end=rss_mb())
    print("RESULT " + json.dumps(result))


def summarise(runs: list[dict]) -> dict:
    wall = sum(sum(r["step_time"][WARMUP:]) for r in runs)
    tokens = sum(sum(r["trained_tokens"][WARMUP:]) for r in runs)
    steps = sum(len(r["step_time"][WARMUP:]) for r in runs)
    return {"median_step_s": statistics.median(t for r in runs for t in r["step_time"][WARMUP:]),
            "median_step_cpu_s": statistics.median(t for r in runs for t in r["step_cpu"][WARMUP:]),
            "timed_steps": steps, "trained_tokens_per_step": tokens / max(steps, 1),
            "s_per_trained_token": wall / max(tokens, 1), "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "loss_curves": [r["loss"] for r in runs]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="135m", help="135m (SmolLM2-135M, cached or its shape) or tiny")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checkpointing", default="off", help="gradient checkpointing rows: off, on or off,on")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sft_vs_trl.json"))
    parser.add_argument("--one", nargs=4, metavar=("IMPL", "MODEL_DIR", "DATA", "SEED"))
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        impl, model_dir, data, seed = args.one
        one(impl, model_dir, data, int(seed), args.steps, json.loads(args.settings))
        return
    if args.steps <= WARMUP:
        raise SystemExit(f"--steps must exceed the {WARMUP} warm-up steps")
    tmp = Path(tempfile.mkdtemp())
    data = curated_rows(tmp / "samples")
    if args.size == "135m":
        from bench_grpo_vs_trl import smollm2_135m_dir

        model_dir, model = smollm2_135m_dir(tmp)
    elif args.size == "tiny":
        from stateset_plugins.models.tiny import build_tiny_model

        model_dir, model = build_tiny_model(tmp / "tiny"), "tests' tiny random model (2 layers, hidden 32)"
    else:
        raise SystemExit(f"unknown size {args.size!r} (135m, tiny)")
    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.exists() else {}
    rows = dict(previous.get("rows", {}))
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    for ckpt in [x.strip() for x in args.checkpointing.split(",") if x.strip()]:
        if ckpt not in ("off", "on"):
            raise SystemExit(f"--checkpointing takes off and/or on, got {ckpt!r}")
        settings = {**SETTINGS, "gradient_checkpointing": ckpt == "on", "threads": args.threads}
        runs: dict[str, list[dict]] = {"ours": [], "trl": []}
        for seed in range(args.seeds):
            for impl in (("ours", "trl") if seed % 2 == 0 else ("trl", "ours")):
                proc = subprocess.run([sys.executable, __file__, "--one", impl, str(model_dir), str(data), str(seed),
                                       "--steps", str(args.steps), "--settings", json.dumps(settings)],
                                      capture_output=True, text=True, env=env)
                line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
                if line is None:
                    raise SystemExit(f"{impl} seed {seed} failed:\n{proc.stderr[-3000:]}")
                runs[impl].append(json.loads(line[len("RESULT "):]))
                print(f"seed {seed} {impl}: median step "
                      f"{statistics.median(runs[impl][-1]['step_time'][WARMUP:]):.3f}s", flush=True)
        ours, trl = summarise(runs["ours"]), summarise(runs["trl"])
        ratio = ours["median_step_s"] / trl["median_step_s"]
        token_ratio = ours["s_per_trained_token"] / trl["s_per_trained_token"]
        rows[f"{args.size} checkpointing {ckpt}"] = {
            "model": model, "settings": settings, "seeds": args.seeds, "steps": args.steps, "warmup_dropped": WARMUP,
            "ours": ours, "trl": trl, "step_time_ratio_ours_over_trl": ratio,
            "per_trained_token_ratio": token_ratio, "target_ratio": TARGET,
            "meets_target": ratio <= TARGET and token_ratio <= TARGET}
    from importlib.metadata import version

    from stateset_agents.core.jsonio import write_json

    write_json(out, {"equal_config": EQUAL, "differences": DIFFERENCES,
                     "machine": {"cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg()},
                     "versions": {p: version(p) for p in ("torch", "transformers", "trl", "peft")}, "rows": rows})
    for key, r in rows.items():
        for name in ("ours", "trl"):
            s = r[name]
            print(f"{key}: {name:4s} step {s['median_step_s']:.3f}s wall / {s['median_step_cpu_s']:.3f}s CPU, "
                  f"{s['trained_tokens_per_step']:.0f} trained tokens per step, {s['s_per_trained_token'] * 1e3:.2f}"
                  f" ms per trained token, peak RSS {s['peak_rss_mb']:.0f} MB")
        print(f"{key}: ratio ours/TRL {r['step_time_ratio_ours_over_trl']:.2f} per step, "
              f"{r['per_trained_token_ratio']:.2f} per trained token (target <= {TARGET}: "
              f"{'met' if r['meets_target'] else 'NOT met'})")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
