"""Benchmark: what a change to the rewards costs. `improve run` in process on the same ingested log, with this
tree's rewards and with a baseline revision's, alternated, each reward `--repeats` times; the ratio of median CPU
times (this tree over the baseline) is the figure, with the median of the per-pair ratios beside it. Both sides
run the same kernel code path and input; only the source tree on the import path differs (the baseline's `kernel/`
and `plugins/`, exported with `git archive`).

    python benchmarks/bench_reward_cost.py --baseline 683fc84 [--n 100000] [--repeats 3] [--instructions 1000]

Target (issue 13): every reward's ratio <= 1.5, by both figures. Results: benchmarks/results/reward_cost.json, and
a table.

CPU time on a shared virtual machine moves by a third from run to run (one pair's ratio 1.1, the next one's 1.9),
so `--instructions K` adds a figure that does not move: the instructions (valgrind's callgrind, which must be
installed) that `improve run` executes on the log's first 2K conversations minus those on its first K, on each
side. The difference is the work of K conversations, with process start, imports and the reward's set-up taken
out; it leaves out what the machine's load, caches and clock do to that work.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

# run as a script: its own directory is sys.path[0], so the sibling benchmark imports by name
import bench_ingest_improve as base_bench  # (the log generator and the timed child)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

RESULTS = ROOT / "benchmarks" / "results" / "reward_cost.json"
TARGET = 1.5


def export_tree(revision: str, into: Path) -> Path:
    """The baseline's kernel/ and plugins/ from git, untouched by this working tree."""
    archive = into / "tree.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), revision, "kernel",
                    "plugins"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def timed_improve(tree: Path | None, ingest_dir: Path, reward: str, out: Path, policy: str | None) -> dict:
    env = {**os.environ, "STATESET_PLUGIN_QUIET": "1"}
    if tree is not None:  # the baseline's sources shadow the installed (editable) ones
        env["PYTHONPATH"] = os.pathsep.join([str(tree / "kernel"), str(tree / "plugins")])
    args = {"step": "improve", "input": str(ingest_dir), "reward": reward, "output": str(out), "policy": policy,
            "runtime": "inprocess"}
    proc = subprocess.run([sys.executable, "-c", base_bench.CHILD, json.dumps(args)], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"improve {reward} failed ({'baseline' if tree else 'this tree'}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def improve_instructions(tree: Path | None, ingest_dir: Path, reward: str, out: Path, policy: str | None) -> int:
    """Instructions callgrind counts for one `improve run` in process (the child of `timed_improve`)."""
    env = {**os.environ, "STATESET_PLUGIN_QUIET": "1"}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree / "kernel"), str(tree / "plugins")])
    args = {"step": "improve", "input": str(ingest_dir), "reward": reward, "output": str(out), "policy": policy,
            "runtime": "inprocess"}
    proc = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c",
                           base_bench.CHILD, json.dumps(args)], capture_output=True, text=True, env=env)
    counted = [line for line in proc.stderr.splitlines() if "Collected :" in line]
    if proc.returncode != 0 or not counted:
        raise SystemExit(f"improve {reward} under valgrind failed ({'baseline' if tree else 'this tree'}):\n"
                         f"{proc.stderr[-3000:]}")
    return int(counted[-1].rsplit(":", 1)[1])


def first_conversations(ingest_dir: Path, k: int, into: Path) -> Path:
    """An ingest folder holding the first `k` transcripts of `ingest_dir` (its summary copied as it is)."""
    into.mkdir(parents=True, exist_ok=True)
    with open(ingest_dir / "transcripts.jsonl", "rb") as src, open(into / "transcripts.jsonl", "wb") as dst:
        for _, line in zip(range(k), src):
            dst.write(line)
    for name in ("ingest_summary.json", "rejects.jsonl"):
        if (ingest_dir / name).exists():
            (into / name).write_bytes((ingest_dir / name).read_bytes())
    return into


def instruction_rows(tree: Path, ingest_dir: Path, rewards: list[str], k: int, work: Path) -> list[dict]:
    """Per reward: callgrind instructions of K conversations' improve work (2K run minus K run), on each side."""
    from stateset_agents.samples import POLICY

    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions counts with valgrind's callgrind, which is not installed here "
                         "(apt-get install -y valgrind)")

    small, large = (first_conversations(ingest_dir, n, work / f"first_{n}") for n in (k, 2 * k))
    rows = []
    for reward in rewards:
        policy = str(POLICY) if reward == "nsr" else None
        counts = {}
        for side, side_tree in (("baseline", tree), ("current", None)):
            print(f"instructions of improve {reward} ({side})", flush=True)
            runs = [improve_instructions(side_tree, folder, reward, work / f"count_{reward}_{side}", policy)
                    for folder in (small, large)]
            counts[side] = {"first_k": runs[0], "first_2k": runs[1], "k_conversations": runs[1] - runs[0]}
        rows.append({"reward": reward, "k": k, **counts,
                     "ratio": counts["current"]["k_conversations"] / counts["baseline"]["k_conversations"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare with")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rewards", default=",".join(base_bench.REWARDS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_ingest_improve"))
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--instructions", type=int, default=0, metavar="K",
                        help="also count instructions (callgrind) of K conversations' improve work on each side")
    args = parser.parse_args()
    from stateset_agents.samples import POLICY

    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.baseline], check=True, capture_output=True,
                              text=True).stdout.strip()
    args.work.mkdir(parents=True, exist_ok=True)
    log = args.work / f"log_{args.n}.jsonl"
    if not log.exists():
        print(f"generating {args.n:,} conversations ...", flush=True)
        base_bench.generate(log, args.n)
    ingest_dir = args.work / f"ingest_{args.n}"
    base_bench.run_child(step="ingest", input=str(log), output=str(ingest_dir))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = export_tree(revision, Path(tmp))
        rewards = [r for r in args.rewards.split(",") if r]
        for reward in rewards if args.repeats > 0 else []:  # --repeats 0: instructions only
            policy = str(POLICY) if reward == "nsr" else None
            runs: dict[str, list[dict]] = {"baseline": [], "current": []}
            for _ in range(args.repeats):
                for side in ("baseline", "current"):  # alternated: both meet the same spells of load
                    print(f"improve {reward} ({side})", flush=True)
                    runs[side].append(timed_improve(tree if side == "baseline" else None, ingest_dir, reward,
                                                    args.work / f"cost_{reward}_{side}", policy))
            cpu = {side: statistics.median(r["cpu_s"] for r in runs[side]) for side in runs}
            # Each pair ran back to back, so it met the same spell of load: its ratio is the paired figure, reported
            # beside the ratio of medians (the target must hold for both).
            pairs = [now["cpu_s"] / before["cpu_s"] for before, now in zip(runs["baseline"], runs["current"])]
            rows.append({"reward": reward, "baseline_cpu_s": cpu["baseline"], "current_cpu_s": cpu["current"],
                         "ratio": cpu["current"] / cpu["baseline"], "pair_ratios": pairs,
                         "median_pair_ratio": statistics.median(pairs),
                         "runs": {side: [{"cpu_s": r["cpu_s"], "seconds": r["seconds"], "rss_mb": r["rss_mb"]}
                                         for r in runs[side]] for side in runs}})
        counted = instruction_rows(tree, ingest_dir, rewards, args.instructions, args.work) if args.instructions else []
    result = {"benchmark": "reward_cost", "baseline": revision, "n": args.n, "repeats": args.repeats,
              "target_ratio": TARGET,
              "met": all(max(r["ratio"], r["median_pair_ratio"]) <= TARGET for r in rows) if rows else None,
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "platform": platform.platform()},
              "rows": rows}
    if counted:
        result["instructions"] = {"k": args.instructions, "tool": "valgrind --tool=callgrind", "rows": counted,
                                  "met": all(r["ratio"] <= TARGET for r in counted)}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.output.with_suffix(".tmp")
    tmp_out.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp_out, args.output)
    print(f"{'reward':<18}{'baseline CPU s':>16}{'this tree CPU s':>17}{'ratio':>8}{'pairs, median':>15}")
    for r in rows:
        print(f"{r['reward']:<18}{r['baseline_cpu_s']:>16.2f}{r['current_cpu_s']:>17.2f}{r['ratio']:>8.2f}"
              f"{r['median_pair_ratio']:>15.2f}")
    for r in counted:
        print(f"{r['reward']:<18} instructions of {r['k']} conversations' improve: "
              f"{r['baseline']['k_conversations'] / 1e6:,.0f} M -> {r['current']['k_conversations'] / 1e6:,.0f} M, "
              f"ratio {r['ratio']:.2f}")
    verdicts = [v for v in (result["met"], result.get("instructions", {}).get("met")) if v is not None]
    print(f"target <= {TARGET}: {'met' if all(verdicts) else 'NOT met'}; wrote {args.output}")


if __name__ == "__main__":
    main()
