"""Weak and strong scaling of the native engine on N processes (`train --nproc N`, torchrun: gloo on the CPU, NCCL
on GPUs).

Strong scaling: the global batch is fixed (``--global-batch`` prompts x G samples) and split over N ranks, so the
ideal step time is 1/N of one process's. Weak scaling: each rank keeps ``--per-rank-batch`` prompts, so the global
batch grows with N and the ideal step time stays flat. Each configuration is one GRPO run of ``--steps`` updates;
the first ``--warmup`` are dropped and the median step time (rollout + grading + update, from metrics.jsonl) gives
samples/s. On the CPU each rank gets one thread (``--threads-per-rank``), as each gets one GPU on a GPU host: N ranks
use N cores (with 2 threads one process on a loaded 2-core machine ran several times slower than with 1, from
oversubscription, which would flatter the N-process figures).

Writes benchmarks/results/scaling.json (one entry per host kind, "cpu" or "gpu"; the other kind's entry is kept)
and prints the table.
Usage: python benchmarks/bench_scaling.py [--nproc 1,2] [--steps 8] [--global-batch 8] [--per-rank-batch 4]
       [--base-model PATH|HUB_ID] [--device cpu|cuda]   (default: 1,2 on the CPU; 1,2,4,8 up to the GPUs present)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "scaling.json"


def _rows(n: int) -> list[dict]:
    from algorithms import task_rows  # the algorithm matrix's prompts (this directory is sys.path[0])

    rows = task_rows()
    return [dict(rows[i % len(rows)], id=f"r{i}") for i in range(n)]


def run_one(model: str, nproc: int, batch: int, args, work: Path) -> dict:
    """One configuration, always as fresh torchrun processes (1 too), so every N starts and threads alike."""
    from stateset_plugins.trainers.launch import run_distributed

    data = work / f"rows-{nproc}-{batch}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows(max(4 * batch, 16))))
    out = work / f"run-{nproc}-{batch}"
    request = {"algorithm": "grpo", "dataset": str(data), "base_model": model, "output": str(out),
               "steps": args.steps, "save_every": args.steps, "nproc": nproc, "overwrite": True,
               "reward_class": "algorithms:DigitReward",  # each rank imports it (PYTHONPATH has this directory)
               "config": {"batch_size": batch, "num_generations": args.generations,
                          "max_new_tokens": args.max_new_tokens, "learning_rate": 1e-4, "device": args.device}}
    threads = args.threads_per_rank
    os.environ["OMP_NUM_THREADS"] = str(threads)
    started = time.perf_counter()
    last = {}
    for event in run_distributed(request, nproc, None, "cpu" if args.device == "cpu" else "cuda"):
        last = event
    wall = time.perf_counter() - started
    if last.get("type") != "completed":
        raise SystemExit(f"nproc {nproc}: {last.get('message')}")
    metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    timed = metrics[args.warmup:] or metrics
    step = statistics.median(m["step_time"] for m in timed)
    samples = batch * args.generations
    # A GRPO sample stops at its end token, so steps differ in the tokens they generate: the same denominator on
    # every row is the tokens generated (summed over the ranks) per second of step time.
    tokens = sum(m.get("rollout_tokens", 0) for m in timed)
    return {"nproc": nproc, "threads_per_rank": threads, "global_batch_prompts": batch, "samples_per_update": samples,
            "median_step_s": round(step, 4), "samples_per_s": round(samples / step, 2),
            "generated_tokens_per_step": round(tokens / len(timed), 1),
            "generated_tokens_per_s": round(tokens / sum(m["step_time"] for m in timed), 2),
            "wall_s": round(wall, 1)}


def table(mode: str, rows: list[dict]) -> str:
    base = rows[0]
    lines = [f"{mode} scaling", "| processes | prompts/update | median step s | samples/s | speed-up | efficiency "
             "| generated tokens/step | generated tokens/s | speed-up per token |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        speed = r["samples_per_s"] / base["samples_per_s"]
        r["speedup"], r["efficiency"] = round(speed, 3), round(speed / (r["nproc"] / base["nproc"]), 3)
        per_token = (r["generated_tokens_per_s"] / base["generated_tokens_per_s"]
                     if base.get("generated_tokens_per_s") else None)
        r["speedup_per_token"] = None if per_token is None else round(per_token, 3)
        lines.append(f"| {r['nproc']} | {r['global_batch_prompts']} | {r['median_step_s']:.3f} | "
                     f"{r['samples_per_s']:.1f} | {r['speedup']:.2f}x | {r['efficiency']:.0%} | "
                     f"{r['generated_tokens_per_step']:.0f} | {r['generated_tokens_per_s']:.1f} | "
                     + ("-" if per_token is None else f"{per_token:.2f}x") + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    import torch

    parser = argparse.ArgumentParser()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    parser.add_argument("--device", default="cuda" if gpus else "cpu")
    parser.add_argument("--nproc", default=None, help="comma-separated process counts")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=8, help="strong scaling: prompts per update")
    parser.add_argument("--per-rank-batch", type=int, default=4, help="weak scaling: prompts per rank")
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--base-model", default=None, help="default: the tests' tiny random model")
    parser.add_argument("--threads-per-rank", type=int, default=1, help="CPU threads a rank (default 1)")
    parser.add_argument("--no-write", action="store_true", help="print only (a smoke run)")
    args = parser.parse_args(argv)
    counts = ([int(x) for x in args.nproc.split(",")] if args.nproc else
              [n for n in (1, 2, 4, 8) if n <= gpus] if args.device == "cuda" else [1, 2])
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as tmp:
        work = Path(tmp)
        model = args.base_model
        if model is None:
            from stateset_plugins.models.tiny import build_tiny_model

            model = str(build_tiny_model(work / "model"))
        strong = [run_one(model, n, args.global_batch, args, work) for n in counts]
        weak = [run_one(model, n, args.per_rank_batch * n, args, work) for n in counts]
    kind = "gpu" if args.device == "cuda" else "cpu"
    print(table("strong", strong))
    print(table("weak", weak))
    entry = {"strong": strong, "weak": weak, "device": args.device, "host": platform.node(),
             "cores": os.cpu_count(), "gpus": gpus, "model": args.base_model or "tiny (tests' random 2-layer)",
             "steps": args.steps, "warmup": args.warmup, "generations": args.generations,
             "max_new_tokens": args.max_new_tokens, "torch": torch.__version__,
             "command": "python benchmarks/bench_scaling.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    if not args.no_write:
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        results[kind] = entry
        RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    return entry


if __name__ == "__main__":
    main()
