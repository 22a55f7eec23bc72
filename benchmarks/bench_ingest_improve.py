"""Benchmark: `ingest` then `improve run` over a generated support log, with each reward, beside the floor.

The floor, measured in the same run on the same files: orjson parsing and re-serialising, line by line, the input
log and every file the two steps write (transcripts.jsonl; graded.jsonl, curated.jsonl, validation.jsonl, test.jsonl). A step's
ratio is its time over the floor of the files it reads and writes. Each step, and each floor right after it, runs in
a fresh child process that reports its wall time, CPU time (with a plugin server's, or the pool workers') and peak
RSS (a Ray row: the driver's only; its workers are the cluster's). The targets are judged on CPU time, because on a shared machine wall time moves with the neighbours' load; both
are recorded. Two input sizes (N/4 and N) show whether memory stays flat as the input grows. At N, beside the
in-process one-process run, run the subprocess runtime (wall-clock throughput: the plugin grades on another core),
`--workers W` (W local grading processes) and Ray (a local cluster of W CPUs, started before the clock: its start is
recorded apart, as `cluster_start_s`), each --repeats times, alternated, and the median run of each is compared
(single runs on a shared machine move by +-10%). Parallel throughput is wall-clock and means something only on an
otherwise idle machine; the `ceiling` variant measures what the machine gives W processes in the same run (W
one-process runs at once, each on the whole input): on a virtual machine two busy cores do not each run as fast as
one busy core, and `--workers W` is judged against that too.

    python benchmarks/bench_ingest_improve.py [--n 100000] [--rewards gsm8k,tool_calling,customer_support,nsr]
        [--workers 2] [--variants inprocess,subprocess,workers,ray,ceiling]

Targets: each pipeline within 3x of its floor, peak RSS flat between the two sizes, subprocess grading at least 70%
of in-process throughput, `--workers 2` at least 1.7x the one-process throughput (on 2 idle cores), Ray local at
least 0.8x of `--workers 2`. Results: benchmarks/results/ingest_improve.json, and a table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
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

extra = {}
if args.get("engine") == "ray":  # the cluster a long-lived deployment starts once: timed apart
    import ray
    t = time.perf_counter()
    ray.init(num_cpus=args["workers"], include_dashboard=False, configure_logging=False, log_to_driver=False)
    extra["cluster_start_s"] = time.perf_counter() - t
start, cpu_start = time.perf_counter(), cpu(resource.RUSAGE_SELF)
if args["step"] == "ingest":
    run_ingest("openai", args["input"], args["output"])
elif args["step"] == "improve":
    # only what a row sets: bench_reward_cost runs this on older trees, whose run_improve has no workers or engine
    parallel = {key: args[key] for key in ("workers", "engine") if key in args}
    run_improve(args["input"], args["reward"], args["output"], policy=args["policy"], runtime=args["runtime"],
                **parallel)
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
                  "plugin_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / kb, **extra}))
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


def start_child(**args) -> tuple[subprocess.Popen, dict]:
    return subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "STATESET_PLUGIN_QUIET": "1"}), args


def finish_child(started: tuple[subprocess.Popen, dict]) -> dict:
    proc, args = started
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{args['step']} failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def run_child(**args) -> dict:
    return finish_child(start_child(**args))


def machine_ceiling(copies: int, **args) -> dict:
    """`copies` one-process runs at once, each on all of the input (its own output folder): what this machine gives
    `copies` independent processes, with nothing shared between them. Reported per run (the longest wall time over
    `copies`), so its throughput is the most any way of splitting the work over `copies` processes could reach here
    (a shared or hyper-threaded core, a shared cache, the neighbours' load all show in it)."""
    started = [start_child(**{**args, "output": f"{args['output']}_{k}"}) for k in range(copies)]
    runs = [finish_child(s) for s in started]
    return {"seconds": max(r["seconds"] for r in runs) / copies, "cpu_s": sum(r["cpu_s"] for r in runs) / copies,
            "rss_mb": max(r["rss_mb"] for r in runs), "plugin_rss_mb": 0.0,
            "copy_seconds": [r["seconds"] for r in runs]}


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def variant_args(variant: str, workers: int) -> dict:
    """How each variant runs `improve run`: the reward's runtime, the grading processes, the engine."""
    return {"inprocess": {"runtime": "inprocess", "workers": 1},
            "subprocess": {"runtime": "subprocess", "workers": 1},
            "workers": {"runtime": "inprocess", "workers": workers},
            "ray": {"runtime": "inprocess", "workers": workers, "engine": "ray"},
            "ceiling": {"runtime": "inprocess", "workers": 1}}[variant]


def variant_name(variant: str, workers: int) -> str:
    return {"workers": f"workers{workers}", "ray": f"ray{workers}", "ceiling": f"ceiling{workers}"}.get(variant,
                                                                                                      variant)


def bench_size(work: Path, n: int, rewards: list[str], variants: list[str], workers: int = 2,
               repeats: int = 1) -> list[dict]:
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
    rows.append({"n": n, "step": "ingest", "reward": "-", "runtime": "inprocess", "variant": "inprocess", **r,
                 **floor(log, transcripts), "conversations": conversations, "turns": None})
    names = {v: variant_name(v, workers) for v in variants}
    for reward in rewards:
        runs: dict[str, list[dict]] = {v: [] for v in variants}
        for _ in range(repeats):
            for v in variants:  # alternated, so every variant meets the same spells of neighbours' load
                out = work / f"improve_{n}_{reward}_{names[v]}"
                print(f"[{n:,}] improve {reward} ({names[v]})", flush=True)
                step = {"step": "improve", "input": str(ingest_dir), "reward": reward, "output": str(out),
                        "policy": str(POLICY) if reward == "nsr" else None, **variant_args(v, workers)}
                runs[v].append(machine_ceiling(workers, **step) if v == "ceiling" else run_child(**step))
        reference = None
        for v in variants:
            out = work / f"improve_{n}_{reward}_{names[v]}" if v != "ceiling" else \
                work / f"improve_{n}_{reward}_{names[v]}_0"
            # The run with the median wall time stands for the step; every run's time is kept beside it.
            r = sorted(runs[v], key=lambda run: run["seconds"])[len(runs[v]) // 2]
            r = {**r, "seconds_runs": [run["seconds"] for run in runs[v]]}
            outputs = [out / name for name in ("graded.jsonl", "curated.jsonl", "validation.jsonl", "test.jsonl")]
            summary = json.loads((out / "improve_summary.json").read_text())
            digests = [summary["outputs"][p.name]["sha256"] for p in outputs]
            reference = reference or digests
            if digests != reference:  # every way of grading writes the same bytes, or its speed means nothing
                raise SystemExit(f"{names[v]} wrote other outputs than {names[variants[0]]} for {reward}")
            args = variant_args(v, workers)
            rows.append({"n": n, "step": "improve", "reward": reward, "runtime": args["runtime"],
                         "variant": names[v], "workers": args["workers"], "engine": args.get("engine", "local"),
                         **r, **floor(transcripts, *outputs), "conversations": conversations,
                         "turns": summary["counts"]["turns_graded"], "curated": summary["counts"]["curated"],
                         "bytes_written": sum(p.stat().st_size for p in outputs)})
    for row in rows:
        row["conv_per_s"] = row["conversations"] / row["seconds"]
        row["ratio_to_floor"] = row["seconds"] / row["floor_s"]
        row["cpu_ratio_to_floor"] = row["cpu_s"] / row["floor_cpu_s"]
    return rows


def end_to_end(work: Path, n: int, rewards: list[str], repeats: int) -> list[dict]:
    """Ingest + improve as a user runs them: the two `stateset-agents` commands, each its own process (start-up and
    imports included), each with its default worker count (one process per core: `ingest --workers`, `improve run
    --workers`). Wall time over the wall-time
    floor of the files both steps read and write; the median of `repeats` alternated runs per reward."""
    from stateset_agents.pipeline.grading_engines import default_workers
    from stateset_agents.samples import POLICY

    log, rows = work / f"log_{n}.jsonl", []
    cli = [sys.executable, "-m", "stateset_agents"]
    env = {**os.environ, "STATESET_PLUGIN_QUIET": "1"}

    def timed(args: list[str]) -> float:
        start = time.perf_counter()
        proc = subprocess.run(cli + args, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(args[:2])} failed:\n{proc.stderr[-3000:]}")
        return time.perf_counter() - start

    runs: dict[str, list[dict]] = {reward: [] for reward in rewards}
    for _ in range(repeats):
        for reward in rewards:
            ingest_dir, out = work / f"e2e_{n}_{reward}_ingest", work / f"e2e_{n}_{reward}_improve"
            print(f"[{n:,}] end to end {reward}", flush=True)
            ingest_s = timed(["ingest", "--format", "openai", "--input", str(log), "--output", str(ingest_dir)])
            improve = ["improve", "run", "--transcripts", str(ingest_dir), "--reward", reward, "--output", str(out)]
            improve_s = timed(improve + (["--policy", str(POLICY)] if reward == "nsr" else []))
            runs[reward].append({"seconds": ingest_s + improve_s, "ingest_s": ingest_s, "improve_s": improve_s})
    for reward in rewards:
        ingest_dir, out = work / f"e2e_{n}_{reward}_ingest", work / f"e2e_{n}_{reward}_improve"
        transcripts = ingest_dir / "transcripts.jsonl"
        outputs = [out / name for name in ("graded.jsonl", "curated.jsonl", "validation.jsonl", "test.jsonl")]
        floor_s = floor(log, transcripts)["floor_s"] + floor(transcripts, *outputs)["floor_s"]
        r = sorted(runs[reward], key=lambda run: run["seconds"])[len(runs[reward]) // 2]
        rows.append({"n": n, "reward": reward, **r, "seconds_runs": [run["seconds"] for run in runs[reward]],
                     "workers": default_workers(), "floor_s": floor_s,
                     "ratio_to_floor": r["seconds"] / floor_s})
    return rows


def evaluate(rows: list[dict], small: int, large: int, workers: int = 2) -> dict:
    """Ratios are CPU time over floor CPU time: on a shared machine wall time moves with the neighbours' load.
    Parallel speed-ups are wall time: they hold only on an idle machine."""
    by = {(r["n"], r["step"], r["reward"], r["variant"]): r for r in rows}
    ingest = by[(large, "ingest", "-", "inprocess")]
    pipelines, memory, subprocess_share, speedup, ray_share, ceiling, of_ceiling = {}, {}, {}, {}, {}, {}, {}
    for (n, step, reward, variant), r in list(by.items()):
        if step != "improve" or variant != "inprocess":
            continue
        if n == large:
            # Both steps over the floor of the input and of every file they write; the transcripts are counted
            # twice there (ingest writes them, improve reads them), as both steps also do that work.
            pipelines[reward] = (ingest["cpu_s"] + r["cpu_s"]) / (ingest["floor_cpu_s"] + r["floor_cpu_s"])
            sub = by.get((n, "improve", reward, "subprocess"))
            if sub:
                subprocess_share[reward] = r["seconds"] / sub["seconds"]
            pool = by.get((n, "improve", reward, f"workers{workers}"))
            if pool:
                speedup[reward] = r["seconds"] / pool["seconds"]
            most = by.get((n, "improve", reward, f"ceiling{workers}"))
            if most:
                ceiling[reward] = r["seconds"] / most["seconds"]
                if pool:
                    of_ceiling[reward] = most["seconds"] / pool["seconds"]
            on_ray = by.get((n, "improve", reward, f"ray{workers}"))
            if on_ray and pool:
                ray_share[reward] = pool["seconds"] / on_ray["seconds"]
        elif (large, "improve", reward, "inprocess") in by:
            memory[reward] = by[(large, "improve", reward, "inprocess")]["rss_mb"] / r["rss_mb"]
    memory["ingest"] = ingest["rss_mb"] / by[(small, "ingest", "-", "inprocess")]["rss_mb"]
    return {
        "pipeline_ratio_to_floor": pipelines, "within_3x": all(v <= 3 for v in pipelines.values()),
        "rss_growth_large_over_small": memory, "memory_flat": all(v <= 1.25 for v in memory.values()),
        "subprocess_over_inprocess_throughput": subprocess_share,
        "subprocess_at_least_70pct": all(v >= 0.7 for v in subprocess_share.values()),
        f"workers{workers}_over_one_process_throughput": speedup,
        f"workers{workers}_at_least_1.7x": all(v >= 1.7 for v in speedup.values()) if speedup else None,
        # what the machine gives `workers` independent one-process runs at once, and the share of it reached
        f"machine_ceiling{workers}_over_one_process_throughput": ceiling,
        f"workers{workers}_share_of_machine_ceiling": of_ceiling,
        f"ray{workers}_over_workers{workers}_throughput": ray_share,
        "ray_at_least_80pct_of_workers": all(v >= 0.8 for v in ray_share.values()) if ray_share else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="conversations at the larger size (N/4 too)")
    parser.add_argument("--rewards", default=",".join(REWARDS))
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each runtime at N, alternated; the median run is reported")
    parser.add_argument("--workers", type=int, default=2, help="grading processes (and Ray CPUs) of the parallel rows")
    parser.add_argument("--variants", default="inprocess,subprocess,workers,ray",
                        help="ways of grading at N, the first the reference (inprocess, subprocess, workers, ray; "
                             "ceiling: W one-process runs at once, what this machine allows W processes)")
    parser.add_argument("--end-to-end", action="store_true",
                        help="also time ingest + improve as the two CLI commands, default worker count (issue 19)")
    parser.add_argument("--note", default=None, help="recorded with the results (say if the machine was busy)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_ingest_improve"))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    rewards = [r for r in args.rewards.split(",") if r]
    args.work.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    small, large = max(1, args.n // 4), args.n
    variants = [v for v in args.variants.split(",") if v]
    if variants[0] != "inprocess" or not set(variants) <= {"inprocess", "subprocess", "workers", "ray", "ceiling"}:
        raise SystemExit("--variants: inprocess first, then any of subprocess, workers, ray, ceiling")
    rows = (bench_size(args.work, small, rewards, ["inprocess"])
            + bench_size(args.work, large, rewards, variants, args.workers, repeats=args.repeats))
    verdict = evaluate(rows, small, large, args.workers)
    e2e = end_to_end(args.work, large, rewards, args.repeats) if args.end_to_end else []
    if e2e:
        verdict["end_to_end_ratio_to_floor"] = {r["reward"]: r["ratio_to_floor"] for r in e2e}
        verdict["end_to_end_within_3x"] = all(r["ratio_to_floor"] <= 3 for r in e2e)
    result = {"benchmark": "ingest_improve", "sizes": [small, large], "rewards": rewards,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                          "load_average_at_start": load, "note": args.note},
              "rows": rows, "end_to_end": e2e, "targets": verdict}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print_table(rows, verdict)
    print(f"wrote {args.output}")


def print_table(rows: list[dict], verdict: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="ingest + improve")
    for name in ("N", "step", "reward", "variant", "turns", "wall s", "conv/s", "floor s", "x floor", "CPU s",
                 "floor CPU s", "x floor CPU", "RSS MB", "plugin RSS MB"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(f"{r['n']:,}", r["step"], r["reward"], r["variant"], f"{r['turns']:,}" if r["turns"] else "",
                      f"{r['seconds']:.1f}", f"{r['conv_per_s']:,.0f}", f"{r['floor_s']:.1f}",
                      f"{r['ratio_to_floor']:.2f}", f"{r['cpu_s']:.1f}", f"{r['floor_cpu_s']:.1f}",
                      f"{r['cpu_ratio_to_floor']:.2f}", f"{r['rss_mb']:.0f}",
                      f"{r['plugin_rss_mb']:.0f}" if r["variant"].startswith(("subprocess", "workers")) else "")
    console = Console(width=180)
    console.print(table)
    console.print_json(json.dumps(verdict))


if __name__ == "__main__":
    main()
