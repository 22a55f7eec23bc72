"""Benchmark: `ingest` then `improve run` over a generated support log, with each reward, beside the floor.

The floor, measured in the same run on the same files: orjson parsing and re-serialising, line by line, the input
log and every file the two steps write (transcripts.jsonl; graded.jsonl, curated.jsonl, validation.jsonl, test.jsonl). A step's
ratio is its time over the floor of the files it reads and writes. Each step, and each floor right after it, runs in
a fresh child process that reports its wall time, CPU time (with a plugin server's) and peak RSS. The targets are
judged on CPU time, because on a shared machine wall time moves with the neighbours' load; both are recorded. Two
input sizes (N/4 and N) show whether memory stays flat as the input grows; the subprocess runtime runs at N beside
the in-process one (wall-clock throughput: the plugin grades on another core), each --repeats times, alternated,
and the median run of each is compared (single runs on this shared machine move by +-10%).

    python benchmarks/bench_ingest_improve.py [--n 100000] [--rewards gsm8k,tool_calling,customer_support,nsr]

Targets: each pipeline within 3x of its floor, peak RSS flat between the two sizes, subprocess grading at least 70%
of in-process throughput. Results: benchmarks/results/ingest_improve.json, and a table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "ingest_improve.json"
REWARDS = ("gsm8k", "tool_calling", "customer_support", "nsr")
MATH_SHARE = 10  # every 10th conversation is a maths question, so gsm8k has something to grade

# Runs one step (or the floor) and reports wall time, CPU time (its own, plus a plugin server's) and peak memory.
# Imports happen before the clocks start.
CHILD = r"""
import json, resource, sys, time
import orjson
args = json.loads(sys.argv[1])
from stateset_agents.pipeline.ingest import run_ingest
from stateset_agents.pipeline.improve import run_improve

def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime

start, cpu_start = time.perf_counter(), cpu(resource.RUSAGE_SELF)
if args["step"] == "ingest":
    run_ingest("openai", args["input"], args["output"])
elif args["step"] == "improve":
    run_improve(args["input"], args["reward"], args["output"], policy=args["policy"], runtime=args["runtime"])
else:  # the floor: parse and re-serialise every line of every file
    for path in args["files"]:
        with open(path, "rb") as f:
            for line in f:
                if line.strip():
                    orjson.dumps(orjson.loads(line))
kb = 1024  # ru_maxrss is in KiB on Linux
print(json.dumps({"seconds": time.perf_counter() - start,
                  "cpu_s": cpu(resource.RUSAGE_SELF) - cpu_start + cpu(resource.RUSAGE_CHILDREN),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / kb,
                  "plugin_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kb}))
"""


def math_conversation(rng: random.Random, cid: str) -> dict:
    a, b, c = rng.randint(2, 99), rng.randint(2, 30), rng.randint(1, 500)
    answer = a * b + c
    given = answer if rng.random() < 0.7 else answer + rng.choice([-10, -1, 1, 7])
    return {"id": cid, "messages": [
        {"role": "system", "content": "Solve the problem. End with '#### <answer>'."},
        {"role": "user", "content": f"A crate holds {a} boxes of {b} bolts, plus {c} loose bolts. How many bolts?"},
        {"role": "assistant", "content": f"{a} * {b} = {a * b}. {a * b} + {c} = {given}.\n#### {given}"}],
        "tools": [], "metadata": {"reference_answer": str(answer)}}


def generate(path: Path, n: int, seed: int = 7) -> None:
    """N conversations in OpenAI message-log form, from the sample generator's scenarios (deterministic)."""
    from stateset_agents.samples import make_samples as ms

    rng = random.Random(seed)
    world = ms.World(rng, first_order=100000)
    scenarios = [fn for fn, _ in ms.SCENARIOS]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        for i in range(n):
            cid = f"bench-{i:07d}"
            if i % MATH_SHARE == MATH_SHARE - 1:
                record = math_conversation(rng, cid)
            else:
                fn, quality = rng.choice(scenarios), rng.choice(ms.QUALITIES)
                conv = ms.Conversation(cid)
                meta = fn(conv, world, quality)
                record = {"id": cid, "messages": conv.messages, "tools": ms.TOOLS,
                          "metadata": {"scenario": fn.__name__, **meta}}
            f.write(orjson.dumps(record) + b"\n")
    os.replace(tmp, path)


def floor(*files: Path) -> dict:
    """Measured right after the step, in a child like the step's, so both see the same machine load."""
    r = run_child(step="floor", files=[str(f) for f in files])
    return {"floor_s": r["seconds"], "floor_cpu_s": r["cpu_s"]}


def run_child(**args) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True,
                          env={**os.environ, "STATESET_PLUGIN_QUIET": "1"})
    if proc.returncode != 0:
        raise SystemExit(f"{args['step']} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def bench_size(work: Path, n: int, rewards: list[str], subprocess_too: bool, repeats: int = 1) -> list[dict]:
    from stateset_agents.samples import POLICY

    log = work / f"log_{n}.jsonl"
    if not log.exists():
        print(f"generating {n:,} conversations ...", flush=True)
        generate(log, n)
    ingest_dir = work / f"ingest_{n}"
    transcripts = ingest_dir / "transcripts.jsonl"
    rows = []
    print(f"[{n:,}] ingest", flush=True)
    r = run_child(step="ingest", input=str(log), output=str(ingest_dir))
    conversations = count_lines(transcripts)
    rows.append({"n": n, "step": "ingest", "reward": "-", "runtime": "inprocess", **r, **floor(log, transcripts),
                 "conversations": conversations, "turns": None})
    for reward in rewards:
        runtimes = ("inprocess", "subprocess") if subprocess_too else ("inprocess",)
        runs: dict[str, list[dict]] = {runtime: [] for runtime in runtimes}
        for _ in range(repeats):
            for runtime in runtimes:  # alternated, so both runtimes meet the same spells of neighbours' load
                out = work / f"improve_{n}_{reward}_{runtime}"
                print(f"[{n:,}] improve {reward} ({runtime})", flush=True)
                runs[runtime].append(run_child(step="improve", input=str(ingest_dir), reward=reward,
                                               output=str(out), runtime=runtime,
                                               policy=str(POLICY) if reward == "nsr" else None))
        for runtime in runtimes:
            out = work / f"improve_{n}_{reward}_{runtime}"
            # The run with the median wall time stands for the step; every run's time is kept beside it.
            r = sorted(runs[runtime], key=lambda run: run["seconds"])[len(runs[runtime]) // 2]
            r = {**r, "seconds_runs": [run["seconds"] for run in runs[runtime]]}
            outputs = [out / name for name in ("graded.jsonl", "curated.jsonl", "validation.jsonl", "test.jsonl")]
            summary = json.loads((out / "improve_summary.json").read_text())
            rows.append({"n": n, "step": "improve", "reward": reward, "runtime": runtime, **r,
                         **floor(transcripts, *outputs), "conversations": conversations,
                         "turns": summary["counts"]["turns_graded"], "curated": summary["counts"]["curated"],
                         "bytes_written": sum(p.stat().st_size for p in outputs)})
    for row in rows:
        row["conv_per_s"] = row["conversations"] / row["seconds"]
        row["ratio_to_floor"] = row["seconds"] / row["floor_s"]
        row["cpu_ratio_to_floor"] = row["cpu_s"] / row["floor_cpu_s"]
    return rows


def evaluate(rows: list[dict], small: int, large: int) -> dict:
    """Ratios are CPU time over floor CPU time: on a shared machine wall time moves with the neighbours' load."""
    by = {(r["n"], r["step"], r["reward"], r["runtime"]): r for r in rows}
    ingest = by[(large, "ingest", "-", "inprocess")]
    pipelines, memory, subprocess_share = {}, {}, {}
    for (n, step, reward, runtime), r in by.items():
        if step != "improve" or runtime != "inprocess":
            continue
        if n == large:
            # Both steps over the floor of the input and of every file they write; the transcripts are counted
            # twice there (ingest writes them, improve reads them), as both steps also do that work.
            pipelines[reward] = (ingest["cpu_s"] + r["cpu_s"]) / (ingest["floor_cpu_s"] + r["floor_cpu_s"])
            sub = by.get((n, "improve", reward, "subprocess"))
            if sub:
                subprocess_share[reward] = r["seconds"] / sub["seconds"]
        elif (large, "improve", reward, "inprocess") in by:
            memory[reward] = by[(large, "improve", reward, "inprocess")]["rss_mb"] / r["rss_mb"]
    memory["ingest"] = ingest["rss_mb"] / by[(small, "ingest", "-", "inprocess")]["rss_mb"]
    return {
        "pipeline_ratio_to_floor": pipelines, "within_3x": all(v <= 3 for v in pipelines.values()),
        "rss_growth_large_over_small": memory, "memory_flat": all(v <= 1.25 for v in memory.values()),
        "subprocess_over_inprocess_throughput": subprocess_share,
        "subprocess_at_least_70pct": all(v >= 0.7 for v in subprocess_share.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="conversations at the larger size (N/4 too)")
    parser.add_argument("--rewards", default=",".join(REWARDS))
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each runtime at N, alternated; the median run is reported")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_ingest_improve"))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    rewards = [r for r in args.rewards.split(",") if r]
    args.work.mkdir(parents=True, exist_ok=True)
    small, large = max(1, args.n // 4), args.n
    rows = (bench_size(args.work, small, rewards, False)
            + bench_size(args.work, large, rewards, True, repeats=args.repeats))
    verdict = evaluate(rows, small, large)
    result = {"benchmark": "ingest_improve", "sizes": [small, large], "rewards": rewards,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
              "rows": rows, "targets": verdict}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print_table(rows, verdict)
    print(f"wrote {args.output}")


def print_table(rows: list[dict], verdict: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="ingest + improve")
    for name in ("N", "step", "reward", "runtime", "turns", "wall s", "conv/s", "floor s", "x floor", "CPU s",
                 "floor CPU s", "x floor CPU", "RSS MB", "plugin RSS MB"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(f"{r['n']:,}", r["step"], r["reward"], r["runtime"], f"{r['turns']:,}" if r["turns"] else "",
                      f"{r['seconds']:.1f}", f"{r['conv_per_s']:,.0f}", f"{r['floor_s']:.1f}",
                      f"{r['ratio_to_floor']:.2f}", f"{r['cpu_s']:.1f}", f"{r['floor_cpu_s']:.1f}",
                      f"{r['cpu_ratio_to_floor']:.2f}", f"{r['rss_mb']:.0f}",
                      f"{r['plugin_rss_mb']:.0f}" if r["runtime"] == "subprocess" else "")
    console = Console(width=180)
    console.print(table)
    console.print_json(json.dumps(verdict))


if __name__ == "__main__":
    main()
