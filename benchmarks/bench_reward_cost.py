"""Benchmark: what a change to the rewards costs. `improve run` in process on the same ingested log, with this
tree's rewards and with a baseline revision's, alternated, each reward `--repeats` times; the ratio of median CPU
times (this tree over the baseline) is the figure, with the median of the per-pair ratios beside it. Both sides
run the same kernel code path and input; only the source tree on the import path differs (the baseline's `kernel/`
and `plugins/`, exported with `git archive`).

    python benchmarks/bench_reward_cost.py --baseline 683fc84 [--n 100000] [--repeats 3]

Target (issue 13): every reward's ratio <= 1.5, by both figures. Results: benchmarks/results/reward_cost.json, and
a table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="git revision to compare with")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--rewards", default=",".join(base_bench.REWARDS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_ingest_improve"))
    parser.add_argument("--output", type=Path, default=RESULTS)
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
        for reward in [r for r in args.rewards.split(",") if r]:
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
    result = {"benchmark": "reward_cost", "baseline": revision, "n": args.n, "repeats": args.repeats,
              "target_ratio": TARGET,
              "met": all(max(r["ratio"], r["median_pair_ratio"]) <= TARGET for r in rows),
              "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                          "platform": platform.platform()},
              "rows": rows}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = args.output.with_suffix(".tmp")
    tmp_out.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp_out, args.output)
    print(f"{'reward':<18}{'baseline CPU s':>16}{'this tree CPU s':>17}{'ratio':>8}{'pairs, median':>15}")
    for r in rows:
        print(f"{r['reward']:<18}{r['baseline_cpu_s']:>16.2f}{r['current_cpu_s']:>17.2f}{r['ratio']:>8.2f}"
              f"{r['median_pair_ratio']:>15.2f}")
    print(f"target <= {TARGET}: {'met' if result['met'] else 'NOT met'}; wrote {args.output}")


if __name__ == "__main__":
    main()
