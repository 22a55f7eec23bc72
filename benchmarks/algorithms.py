"""The algorithm matrix: objectives x seeds on one task and model with matched budgets.

Every (objective, seed) run gets the same training prompts in the same order (the data cursor depends only on the
seed), the same group size G, the same max_new_tokens and temperature, the same learning rate and the same number
of committed updates; everything else is each objective's documented default (VAPO's value pre-training rollouts
are extra and reported). Each run is a forked child process, so its peak memory is its own (the kernel's peak-RSS
mark is reset at the start of the child).

Per run: the training reward curve, step time, peak RSS, KL(adapter || base) on held-out samples, and the
held-out reward of the base model and of the adapter (same prompts, same decoding, same seed). Across seeds: the
final held-out reward with a bootstrap interval, and each objective's paired comparison against GRPO and against
the untrained model. Pairing unit: the seed (run s of every objective shares seed s: data order, initial LoRA
weights, evaluation sampling); two-sided exact sign-flip test and a percentile bootstrap interval over seeds, from
`stateset_agents.plugin_api.stats`.

    python benchmarks/algorithms.py [--algorithms grpo,ppo,...] [--seeds 6] [--steps 40] [--model tiny-random]
    stateset-agents benchmark algorithms ...          (the same, as a command)

Writes OUT/runs.jsonl, OUT/summary.json, OUT/table.md and OUT/curves.png (default OUT: benchmarks/results/algorithms).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from stateset_agents import Reward, TurnGrade

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_ALGORITHMS = ("grpo", "gspo", "dapo", "gepo", "cispo", "ppo", "vapo")
# The task: a reward the random tiny model can learn in a few CPU minutes (the share of digits in the reply),
# trained on one set of prompts and judged on prompts it never saw.
TRAIN_PROMPTS = ["say a number", "what is 2 + 3", "my order A1 has not arrived", "please refund order 42", "hello",
                 "thanks, goodbye", "call the tool get_order", "how can I help you today", "the answer is 7",
                 "digits 12 34 56", "what is 7", "refund my order"]
HELD_OUT = ["what is 5 + 5", "order 90 is late", "hello there", "can you help me", "my refund for order 12",
            "tell me the answer", "goodbye", "where is order B7", "count to 3", "the tool failed",
            "is 8 more than 6", "thanks for the help", "what day is it", "please call me", "my package is lost",
            "give me a digit"]
BUDGET = {"batch_size": 2, "num_generations": 8, "max_new_tokens": 12, "temperature": 1.0, "learning_rate": 2e-2}
EVAL_SAMPLES = 4  # samples per held-out prompt and side


class DigitReward(Reward):
    """The task's reward: the share of the reply's characters that are digits. The benchmark's own, so a change to
    a test fixture cannot change what the matrix measures; its identity is the one earlier results recorded."""

    name = "toy_digits"
    version = "1.0"

    def grade_turn(self, conversation, turn_index):
        text = conversation["messages"][turn_index].get("content") or ""
        digits = sum(c.isdigit() for c in text)
        return TurnGrade(score=digits / len(text) if text else 0.0, breakdown={"digits": digits, "chars": len(text)},
                         reason="digit share")


def task_rows() -> list[dict]:
    return [{"id": f"t{i}", "prompt": [{"role": "user", "content": p}],
             "completion": {"role": "assistant", "content": "x"}} for i, p in enumerate(TRAIN_PROMPTS)]


def _reset_peak_rss() -> bool:
    try:  # Linux: "5" resets the VmHWM (peak RSS) mark of this process
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_mb(reset: bool) -> float:
    if reset:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def heldout_kl(backend, renderer, config) -> float:
    """KL(adapter || base) per sampled token on held-out prompts: the mean of log pi - log ref over tokens the
    adapter sampled (the unbiased Monte Carlo estimate)."""
    import torch

    from stateset_plugins.models.batch import Sample, collate

    prompts = [renderer.prompt_ids([{"role": "user", "content": p}]) for p in HELD_OUT]
    gens = backend.generate(prompts, max_new_tokens=config.max_new_tokens, temperature=config.temperature)
    samples = [Sample(f"k{i}", f"k{i}", p, g.ids, [True] * len(g.ids), g.logps) for i, (p, g) in
               enumerate(zip(prompts, gens))]
    batch = collate(samples, backend.pad_id, 1)
    new = backend.logprobs(batch, temperature=config.temperature)
    ref = backend.logprobs(batch, temperature=config.temperature, reference=True)
    m = batch.completion_mask
    return float((torch.where(m > 0, new - ref, torch.zeros_like(new))).sum() / m.sum())


def run_one(algorithm: str, seed: int, steps: int, model_spec: str | None, budget: dict) -> dict[str, Any]:
    """One training run and its held-out evaluation, in this process."""
    import torch

    torch.set_num_threads(1)
    from stateset_plugins.trainers.api import TRAINERS
    from stateset_plugins.models.evaluation import EvalProtocol, evaluate
    from stateset_plugins.models.loading import load_base_model

    reset = _reset_peak_rss()
    model, tokenizer, info = load_base_model(model_spec)
    reward = DigitReward()
    config = {**budget, "steps": steps, "seed": seed}
    trainer = TRAINERS[algorithm](model, tokenizer, reward=reward, dataset=task_rows(), config=config,
                                  base_model_info=info)
    metrics = []
    started = time.perf_counter()
    for event in trainer.events():
        if event["type"] == "metrics":
            metrics.append(event["metrics"])
        elif event["type"] == "failed":
            raise RuntimeError(f"{algorithm} seed {seed} failed: {event.get('message')}")
    train_time = time.perf_counter() - started
    cases = [{"id": f"h{i}.{k}", "prompt": [{"role": "user", "content": p}], "tools": [], "metadata": {}}
             for k in range(EVAL_SAMPLES) for i, p in enumerate(HELD_OUT)]
    # The matrix compares objectives on samples at the training temperature (EVAL_SAMPLES per prompt), scoring
    # every answer as written: the same protocol it has always used, so earlier results stay comparable.
    protocol = EvalProtocol(temperature=trainer.config.temperature, max_new_tokens=trainer.config.max_new_tokens,
                            seed=trainer.config.seed, allow_truncation=True)
    ev = evaluate(trainer.backend, trainer.renderer, reward, cases, protocol)
    n = len(HELD_OUT)
    per_prompt = {side: [statistics.fmean(ev["cases"][k * n + i][side]["score"] for k in range(EVAL_SAMPLES))
                         for i in range(n)] for side in ("base", "candidate")}
    times = [m["step_time"] for m in metrics]
    return {"algorithm": algorithm, "seed": seed, "steps": len(metrics), "model": info, "config": config,
            "reward_curve": [m["reward_mean"] for m in metrics],
            "heldout_base": per_prompt["base"], "heldout_candidate": per_prompt["candidate"],
            "heldout_base_mean": statistics.fmean(per_prompt["base"]),
            "heldout_mean": statistics.fmean(per_prompt["candidate"]),
            "kl": heldout_kl(trainer.backend, trainer.renderer, trainer.config),
            "step_time_median": statistics.median(times[1:] if len(times) > 1 else times),
            "train_time": train_time, "peak_rss_mb": _peak_rss_mb(reset), "peak_rss_method":
                "VmHWM after reset" if reset else "ru_maxrss (includes the parent's pages)"}


def _child(queue, args) -> None:
    try:
        queue.put(("ok", run_one(*args)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def run_isolated(*args) -> dict[str, Any]:
    """run_one in a forked child (torch already imported here, so a child costs no import time)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, args))
    proc.start()
    status, value = queue.get()
    proc.join()
    if status != "ok":
        raise RuntimeError(value)
    return value


def summarise(runs: Sequence[dict], baseline: str = "grpo") -> dict[str, Any]:
    from stateset_agents.plugin_api import stats

    by_algo: dict[str, dict[int, dict]] = {}
    for r in runs:
        by_algo.setdefault(r["algorithm"], {})[r["seed"]] = r
    out: dict[str, Any] = {"pairing": "seed (same data order, initial weights and evaluation sampling per seed)",
                           "test": "two-sided sign-flip permutation over seeds; 95% percentile bootstrap over seeds",
                           "algorithms": {}}
    for algo, seeds in by_algo.items():
        order = sorted(seeds)
        final = [seeds[s]["heldout_mean"] for s in order]
        low, high = stats.bootstrap_mean_interval(final) if len(final) > 1 else (final[0], final[0])
        row = {"seeds": order, "heldout_mean": stats.mean(final), "heldout_interval": [low, high],
               "step_time_median": statistics.median(seeds[s]["step_time_median"] for s in order),
               "peak_rss_mb": max(seeds[s]["peak_rss_mb"] for s in order),
               "kl": stats.mean([seeds[s]["kl"] for s in order]),
               "vs_untrained": stats.paired_comparison([seeds[s]["heldout_base_mean"] for s in order], final)}
        if baseline in by_algo and algo != baseline:
            common = [s for s in order if s in by_algo[baseline]]
            row["vs_" + baseline] = stats.paired_comparison([by_algo[baseline][s]["heldout_mean"] for s in common],
                                                            [seeds[s]["heldout_mean"] for s in common])
        out["algorithms"][algo] = row
    return out


def markdown(summary: dict, budget: dict, steps: int, model: str) -> str:
    lines = [f"# Algorithm matrix ({model}, {steps} committed updates, budget {json.dumps(budget)})", "",
             f"Pairing unit: {summary['pairing']}. Test: {summary['test']}.", "",
             "| objective | held-out reward (95% CI over seeds) | vs untrained: diff, p | vs GRPO: diff (95% CI), p "
             "| step time (s) | peak RSS (MB) | KL to base |", "|---|---|---|---|---|---|---|"]
    for algo, r in summary["algorithms"].items():
        u = r["vs_untrained"]
        g = r.get("vs_grpo")
        vs_grpo = "baseline" if g is None else (f"{g['mean_difference']:+.3f} ({g['interval']['low']:+.3f}, "
                                                f"{g['interval']['high']:+.3f}), p={g['p_value']:.3f}")
        lines.append(f"| {algo} | {r['heldout_mean']:.3f} ({r['heldout_interval'][0]:.3f}, "
                     f"{r['heldout_interval'][1]:.3f}) | {u['mean_difference']:+.3f}, p={u['p_value']:.3f} | "
                     f"{vs_grpo} | {r['step_time_median']:.3f} | {r['peak_rss_mb']:.0f} | {r['kl']:.3f} |")
    return "\n".join(lines) + "\n"


def plot(runs: Sequence[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 5))
    for algo in dict.fromkeys(r["algorithm"] for r in runs):
        curves = np.array([r["reward_curve"] for r in runs if r["algorithm"] == algo])
        mean, std = curves.mean(0), curves.std(0)
        x = np.arange(1, curves.shape[1] + 1)
        ax.plot(x, mean, label=f"{algo} (n={len(curves)})")
        ax.fill_between(x, mean - std, mean + std, alpha=0.15)
    ax.set_xlabel("committed update")
    ax.set_ylabel("training reward (mean over seeds, band: +-1 sd)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_matrix(algorithms: Sequence[str] = DEFAULT_ALGORITHMS, seeds: int = 6, steps: int = 40,
               model: str | None = "tiny-random", out: str | Path | None = None, budget: dict | None = None,
               log=print) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    budget = {**BUDGET, **(budget or {})}
    out = Path(out or ROOT / "benchmarks" / "results" / "algorithms")
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    with open(out / "runs.jsonl", "w") as f:
        for seed in range(seeds):  # seed-major: drift on a shared machine hits every objective alike
            for algo in algorithms:
                r = run_isolated(algo, seed, steps, model, budget)
                runs.append(r)
                f.write(json.dumps(r) + "\n")
                f.flush()
                log(f"{algo} seed {seed}: held-out {r['heldout_mean']:.3f} (base {r['heldout_base_mean']:.3f}), "
                    f"step {r['step_time_median']:.3f}s, peak {r['peak_rss_mb']:.0f} MB, kl {r['kl']:.3f}")
    return report(runs, out, budget, steps, model)


def report(runs: Sequence[dict], out: Path, budget: dict, steps: int, model: str | None) -> dict[str, Any]:
    """summary.json, table.md and curves.png from the runs (also usable on a saved runs.jsonl)."""
    summary = summarise(runs)
    summary.update(budget=budget, steps=steps, model=model, seeds=len({r["seed"] for r in runs}),
                   objectives=list(dict.fromkeys(r["algorithm"] for r in runs)))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "table.md").write_text(markdown(summary, budget, steps, str(model)))
    plot(runs, out / "curves.png")
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--algorithms", default=",".join(DEFAULT_ALGORITHMS))
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--model", default="tiny-random", help="tiny-random, a local path, .gguf or hub id")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    run_matrix(args.algorithms.split(","), args.seeds, args.steps, args.model, args.out)
    print((Path(args.out or ROOT / "benchmarks" / "results" / "algorithms") / "table.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
