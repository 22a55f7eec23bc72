"""Resident memory per phase of our engine: SFT of SmolLM2-135M on 4 rows of 512 prompt tokens, and GRPO at the
settings of benchmarks/bench_grpo_vs_trl.py, each with gradient checkpointing off and on (and SFT with the
detached prompt, ``prompt_gradient: false``, and with ``update_rows``: SFT's chunks are plain gradient accumulation,
GRPO's take one more forward pass without gradient; and GRPO sampling from a bfloat16 copy, ``rollout_dtype``).

Each configuration runs the real trainer in its own process (peak RSS is that run's). The backend's calls are
wrapped to read RSS after each: "load" (model and adapter built), "rollout" (generate), "reference" (reference
log-probs), "update" (forward and backward), "step" (optimizer step); for each phase the file records the RSS
after it and the process's peak so far (ru_maxrss), over every step of the run. Step times come with them, so a
memory option's cost in speed is on the same row. Writes benchmarks/results/memory.json.

Usage: python benchmarks/bench_memory.py [--size 135m|tiny] [--steps 3] [--threads 1] [--only sft,grpo]
       [--out benchmarks/results/memory.json]
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
from machine import peak_rss_mb, rss_mb  # a sibling module: this directory is sys.path[0]

TARGETS_MB = {"sft": 2048, "grpo": 1536}  # issue 19
SFT_ROWS, SFT_PROMPT_TOKENS, SFT_COMPLETION = 4, 512, "Your order NW-10024 ships tomorrow; the new address is saved."
CONFIGS = {
    "sft": [{"gradient_checkpointing": False}, {"gradient_checkpointing": True},
            {"gradient_checkpointing": False, "prompt_gradient": False},
            {"gradient_checkpointing": True, "release_freed_memory": True},
            {"gradient_checkpointing": False, "update_rows": 1}, {"gradient_checkpointing": False, "update_rows": 2}],
    "grpo": [{"gradient_checkpointing": False}, {"gradient_checkpointing": True},
             {"gradient_checkpointing": True, "release_freed_memory": True},
             {"gradient_checkpointing": False, "update_rows": 4}],
}
#: The same runs started on jemalloc (`models.allocator`: what a trainer's child process gets when it is installed).
JEMALLOC = {"sft": [{"gradient_checkpointing": False}, {"gradient_checkpointing": False, "update_rows": 1},
                    {"gradient_checkpointing": True}],
            "grpo": [{"gradient_checkpointing": False}, {"gradient_checkpointing": True},
                     {"gradient_checkpointing": False, "update_rows": 4},
                     {"gradient_checkpointing": False, "rollout_dtype": "bfloat16"}]}


def sft_rows(tokenizer) -> list[dict]:
    """4 rows whose rendered prompt is 512 tokens (a long user message, cut by max_prompt_tokens 512)."""
    words = "please check the status of my order and the shipping address on file for the last delivery ".split()
    text = " ".join(words[i % len(words)] for i in range(2 * SFT_PROMPT_TOKENS))
    return [{"id": f"row-{k}", "prompt": [{"role": "user", "content": f"{k}: {text}"}],
             "completion": {"role": "assistant", "content": SFT_COMPLETION}} for k in range(SFT_ROWS)]


def run(kind: str, model_dir: str, steps: int, options: dict) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from stateset_plugins.models.backend import LocalTorchBackend

    phases: dict[str, list[tuple[float, float]]] = {}

    def mark(name: str) -> None:
        phases.setdefault(name, []).append((rss_mb(), peak_rss_mb()))

    def wrap(method: str, name):
        inner = getattr(LocalTorchBackend, method)

        def timed(self, *a, **k):
            out = inner(self, *a, **k)
            mark(name(k) if callable(name) else name)
            return out
        setattr(LocalTorchBackend, method, timed)

    wrap("generate", "rollout")
    wrap("logprobs", lambda k: "reference" if k.get("reference") else "scoring")
    wrap("forward_backward", "update")
    wrap("optimizer_step", "step")
    mark("start")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if kind == "sft":
        from stateset_agents.training.sft_trainer import SFTTrainer

        config = {"steps": steps, "batch_size": SFT_ROWS, "max_prompt_tokens": SFT_PROMPT_TOKENS, "save_every": steps,
                  **options}
        trainer = SFTTrainer(model, tokenizer, dataset=sft_rows(tokenizer), config=config)
    else:
        from algorithms import DigitReward
        from bench_grpo_vs_trl import PROMPTS, SETTINGS

        from stateset_agents import GRPOTrainer

        rows = [{"prompt": [{"role": "user", "content": p}], "completion": {"role": "assistant", "content": "x"}}
                for p in PROMPTS]
        config = {"steps": steps, "batch_size": SETTINGS["prompts_per_step"], "save_every": steps,
                  "num_generations": SETTINGS["num_generations"], "max_new_tokens": SETTINGS["max_new_tokens"],
                  "learning_rate": SETTINGS["learning_rate"], "beta": SETTINGS["beta"], **options}
        trainer = GRPOTrainer(model, tokenizer, reward=DigitReward(), dataset=rows, config=config)
    mark("load")
    times, t0 = [], time.perf_counter()
    trained = []
    for e in trainer.events():
        if e["type"] == "metrics":
            times.append(e["metrics"]["step_time"])
            trained.append(e["metrics"].get("trained_tokens"))
    wall = time.perf_counter() - t0
    from stateset_plugins.models.allocator import active_allocator

    return {"allocator": active_allocator(), "phases": {k: {"rss_mb_max": max(r for r, _ in v), "peak_rss_mb": max(p for _, p in v)}
                       for k, v in phases.items()},
            "peak_rss_mb": peak_rss_mb(), "step_time": times, "median_step_s": statistics.median(times),
            "wall_s": wall, "trained_tokens": trained}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", default="135m", help="135m (SmolLM2-135M, cached or its shape) or tiny")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--only", default="sft,grpo")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "memory.json"))
    parser.add_argument("--one", nargs=3, metavar=("KIND", "MODEL_DIR", "OPTIONS"))
    args = parser.parse_args()
    if args.one:
        import torch

        torch.set_num_threads(args.threads)
        print("RESULT " + json.dumps(run(args.one[0], args.one[1], args.steps, json.loads(args.one[2]))))
        return
    tmp = Path(tempfile.mkdtemp())
    if args.size == "135m":
        from bench_grpo_vs_trl import smollm2_135m_dir

        model_dir, model = smollm2_135m_dir(tmp)
    elif args.size == "tiny":
        from stateset_plugins.models.tiny import build_tiny_model

        model_dir, model = build_tiny_model(tmp / "tiny"), "tests' tiny random model"
    else:
        raise SystemExit(f"unknown size {args.size!r}")
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    from stateset_plugins.models.allocator import ALLOCATOR_ENV, allocator_env

    rows, kinds = [], [k.strip() for k in args.only.split(",") if k.strip()]
    system = {**env, ALLOCATOR_ENV: "system"}
    jemalloc = {**system, **allocator_env({**env, ALLOCATOR_ENV: "auto"})}
    if "LD_PRELOAD" not in jemalloc:
        print("jemalloc is not installed (apt-get install libjemalloc2): its rows are skipped", flush=True)
    runs = [(kind, options, system) for kind in kinds for options in CONFIGS[kind]]
    runs += [(kind, options, jemalloc) for kind in kinds for options in JEMALLOC[kind] if "LD_PRELOAD" in jemalloc]
    for kind, options, child_env in runs:
        proc = subprocess.run([sys.executable, __file__, "--one", kind, str(model_dir), json.dumps(options),
                               "--steps", str(args.steps), "--threads", str(args.threads)],
                              capture_output=True, text=True, env=child_env)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"{kind} {options} failed:\n{proc.stderr[-3000:]}")
        got = json.loads(line[len("RESULT "):])
        rows.append({"kind": kind, "options": options, "allocator": got.pop("allocator"),
                     "target_peak_rss_mb": TARGETS_MB[kind],
                     "meets_target": got["peak_rss_mb"] <= TARGETS_MB[kind], **got})
        phases = ", ".join(f"{k} {v['rss_mb_max']:.0f}/{v['peak_rss_mb']:.0f}" for k, v in got["phases"].items())
        print(f"{kind} {options} on {rows[-1]['allocator']}: peak {got['peak_rss_mb']:.0f} MB (target "
              f"{TARGETS_MB[kind]}), median step {got['median_step_s']:.3f}s; RSS/peak MB after {phases}", flush=True)
    from stateset_agents.core.jsonio import write_json

    out = Path(args.out)
    write_json(out, {"model": model, "size": args.size, "steps": args.steps, "threads": args.threads,
                     "sft_batch": f"{SFT_ROWS} rows of {SFT_PROMPT_TOKENS} prompt tokens",
                     "grpo_settings": "benchmarks/bench_grpo_vs_trl.py SETTINGS",
                     "machine": {"cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg()}, "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
