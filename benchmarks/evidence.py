"""Evidence as a standing benchmark: does the shipped recipe (the quickstart's SFT -> GRPO from that parent) make
a held-out gain that survives seeds, and what does SFT alone do?

    .venv/bin/python benchmarks/evidence.py            # or: stateset-agents benchmark evidence
    .venv/bin/python benchmarks/evidence.py --fast     # the tiny random model: the mechanics in a minute or two

Plan (SmolLM2-135M offline, `tool_calling` with the expected calls each log carries):

* sample logs (the package's, with its frozen validation.jsonl / test.jsonl): 6 seeds of sft->grpo, 3 of sft;
* tau-airline dev logs (read from ../shared/data, never copied: `improve run` splits them by task into curated /
  validation / test inside the work folder): 3 seeds of sft->grpo.

Each run nominates its best checkpoint on validation and looks once at test (`run_recipe`, the quickstart's own
code). Per recipe the gate (`pipeline.gate.run_gate`: recorded test looks, paired over cases, seeds averaged per
case, sign-flip p-value, bootstrap interval, no case regression past the tolerance) decides. Results:
benchmarks/results/evidence.json, evidence.md and evidence.png (`--only tau-airline`: evidence_tau-airline.*).

Resumable: every finished run leaves `evidence_run.json` in its folder under --work; a rerun skips finished runs
and restarts an unfinished one from scratch (a killed run loses only the run it was in). Run folders live under
--work (default ~/.cache/stateset-agents/evidence/, outside the checkout).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT.parent / "shared" / "data"
DONE = "evidence_run.json"
REWARD = "tool_calling"

#: (data, recipe, seeds): the issue's plan.
PLAN = [("samples", "sft->grpo", 6), ("samples", "sft", 3), ("tau-airline", "sft->grpo", 3)]


def default_work(fast: bool) -> Path:
    """Outside the project (run folders are large, and the tau-derived logs must not land in the checkout)."""
    cache = Path(os.environ.get("STATESET_AGENTS_CACHE", Path.home() / ".cache" / "stateset-agents"))
    return cache / "evidence" / ("fast" if fast else "full")


def _log(line: str) -> None:
    print(line, flush=True)


def prepare(data: str, work: Path, data_root: Path) -> dict[str, Any]:
    """Curated / validation / test files of one data source, made once in the work folder."""
    from stateset_agents.pipeline.improve import run_improve
    from stateset_agents.pipeline.ingest import run_ingest
    from stateset_agents.pipeline.quickstart import sample_path

    folder = work / "data" / data
    ready = folder / "prepared.json"
    if ready.exists():
        return json.loads(ready.read_text())
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    if data == "samples":
        run_ingest("openai", str(sample_path("support_logs.jsonl")), folder / "ingested")
        run_improve(folder / "ingested", REWARD, folder / "improved", held_out_fraction=0.0)
        out = {"curated": str(folder / "improved" / "curated.jsonl"),
               "validation": str(sample_path("validation.jsonl")), "test": str(sample_path("test.jsonl")),
               "policy": None}
    elif data == "tau-airline":
        logs = folder / "tau_logs.jsonl"  # derived in the work folder (outside the project), never committed
        logs.write_text("".join(json.dumps(r) + "\n" for r in tau_records(data_root / "tau-airline")))
        run_ingest("openai", str(logs), folder / "ingested")
        run_improve(folder / "ingested", REWARD, folder / "improved", held_out_fraction=0.2)
        improved = folder / "improved"
        out = {"curated": str(improved / "curated.jsonl"), "validation": str(improved / "validation.jsonl"),
               "test": str(improved / "test.jsonl"), "policy": False}
    else:
        raise ValueError(f"unknown data {data!r}")
    ready.write_text(json.dumps(out))
    return out


def tau_records(folder: Path) -> list[dict[str, Any]]:
    """The dev trajectories as OpenAI message logs: messages, declared tools, and the task's `actions` as
    `expected_tool_calls` (metadata a team could log); never the success label or the task instructions."""
    tools = json.loads((folder / "tools.json").read_text())
    records = []
    for t in json.loads((folder / "trajectories.dev.json").read_text()):
        expected = [{"name": a["name"], "arguments": a["kwargs"]} for a in t["info"]["task"]["actions"]]
        records.append({"id": f"tau-{t['task_id']}-{t['trial']}", "messages": t["traj"], "tools": tools,
                        "metadata": {"task_id": t["task_id"], "trial": t["trial"], "expected_tool_calls": expected}})
    return records


def run_one(data: str, recipe: str, seed: int, files: Mapping[str, Any], work: Path, preset: Mapping[str, Any],
            log: Callable[[str], None]) -> dict[str, Any]:
    from stateset_agents.pipeline.quickstart import QuickstartResult, run_recipe, summary_record

    folder = work / "runs" / data / recipe.replace("->", "-") / f"seed{seed}"
    if (folder / DONE).exists():
        log(f"  {data} {recipe} seed {seed}: done earlier, kept")
        return json.loads((folder / DONE).read_text())
    if folder.exists():
        log(f"  {data} {recipe} seed {seed}: an unfinished run, started over")
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    started, code = time.time(), revision()  # the code the run starts with (its child processes import it then)
    result = QuickstartResult(folder)
    run_recipe(result, Path(files["curated"]), Path(files["validation"]), Path(files["test"]), preset, seed=seed,
               recipe=recipe, policy=files.get("policy"), step=lambda m: log(f"    {m}"))
    record = {"data": data, "recipe": recipe, "seed": seed, "run": str(result.run), "revision": code,
              "seconds": round(time.time() - started, 1), **summary_record(result)}
    (folder / DONE).write_text(json.dumps(record, indent=1))
    log(f"  {data} {recipe} seed {seed}: test {_short(record)} ({record['seconds']:.0f} s)")
    return record


def revision() -> str | None:
    """The checkout's commit, "+" when its sources differ from it (a run records the code it ran)."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        dirty = git("status", "--porcelain", "--", "kernel", "plugins")
        return git("rev-parse", "HEAD") + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _short(record: Mapping[str, Any]) -> str:
    s = record["test"]["statistics"]
    return (f"{s['base_mean']:.3f} -> {s['candidate_mean']:.3f}, {s['improved']} up / {s['regressed']} down, "
            f"p {s['p_value']:.3g}")


def gate(records: Sequence[Mapping[str, Any]], test: str, output: Path) -> dict[str, Any]:
    from stateset_agents.pipeline.gate import run_gate

    if len(records) < 2:
        return {"promoted": False, "failed_conditions": ["min_seeds"], "note": "fewer than 2 runs"}
    promotion = run_gate([r["run"] for r in records], test, REWARD, output, min_seeds=len(records))
    return {k: promotion[k] for k in ("promoted", "failed_conditions", "conditions", "statistics", "criteria")} | {
        "cases": promotion["prompts"]["cases"], "regressions": len(promotion["regressions"])}


def run(plan: Sequence[tuple[str, str, int]] = PLAN, *, fast: bool = False, work: Path | None = None,
        output: Path | None = None, data_root: Path = DATA, log: Callable[[str], None] = _log,
        preset: Mapping[str, Any] | None = None, threads: int | None = None) -> dict[str, Any]:
    import torch

    from stateset_agents.pipeline.quickstart import FAST, FULL, cpu_threads

    preset = preset or (FAST if fast else FULL)
    threads = cpu_threads(threads)
    torch.set_num_threads(threads)
    log(f"{threads} CPU thread(s); load average {os.getloadavg()[0]:.2f}")
    output = Path(output or RESULTS)
    work = Path(work or default_work(fast))
    work.mkdir(parents=True, exist_ok=True)
    started = time.time()
    groups = []
    for data, recipe, seeds in plan:
        files = prepare(data, work, data_root)
        log(f"{data} / {recipe}: {seeds} seed(s)")
        records = [run_one(data, recipe, seed, files, work, preset, log) for seed in range(seeds)]
        decision = gate(records, files["test"], work / "gates" / data / recipe.replace("->", "-"))
        groups.append({"data": data, "recipe": recipe, "seeds": seeds, "runs": records, "gate": decision})
    report = {"model": preset["base_model"] or "SmolLM2-135M-Instruct (offline default, dequantised Q4_1)",
              "cpu_threads": threads,
              "reward": REWARD, "preset": preset, "groups": groups, "seconds": round(time.time() - started, 1),
              "revision": revision(),
              "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    name = results_name(plan, fast)
    output.mkdir(parents=True, exist_ok=True)
    (output / f"{name}.json").write_text(json.dumps(report, indent=1))
    (output / f"{name}.md").write_text(render(report))
    plot(report, output / f"{name}.png")
    return report


def results_name(plan: Sequence[tuple[str, str, int]], fast: bool) -> str:
    """evidence[_fast], with the data sources appended when the plan is part of PLAN (`--only`): a partial run
    never overwrites the whole plan's results."""
    name = "evidence_fast" if fast else "evidence"
    sources = sorted({data for data, _, _ in plan})
    if sources != sorted({data for data, _, _ in PLAN}):
        name += "_" + "+".join(sources)
    return name


def render(report: Mapping[str, Any]) -> str:
    lines = [f"# Evidence: {report['model']}, reward `{report['reward']}`", "",
             "Per run: the nominated (best on validation) checkpoint's one look at test, paired over cases. Gate: "
             "seeds averaged per case, sign-flip p < 0.05, no case down by more than 0.2.", "",
             "| data | recipe | seed | nominated step | test cases | base -> adapter | improved / regressed | p | "
             "95% interval | cases neither side cut | exact call match base -> adapter |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for g in report["groups"]:
        for r in g["runs"]:
            s = r["test"]["statistics"]
            iv = s.get("interval") or {}
            cc = r["test"]["complete_cases"]
            ccs = cc.get("statistics") or {}
            exact = (r.get("unoptimised") or {}).get("exact_tool_call_match", {}).get("totals", {})
            lines.append(
                f"| {g['data']} | {g['recipe']} | {r['seed']} | {r['nominated_checkpoint']} | {s['cases']} | "
                f"{s['base_mean']:.3f} -> {s['candidate_mean']:.3f} | {s['improved']} / {s['regressed']} | "
                f"{s['p_value']:.3g} | [{iv.get('low', float('nan')):.3f}, {iv.get('high', float('nan')):.3f}] | "
                f"{cc.get('cases')}: {ccs.get('mean_difference', float('nan')):+.3f} | "
                f"{exact.get('base_mean', float('nan')):.3f} -> {exact.get('candidate_mean', float('nan')):.3f} |")
    lines += ["", "| data | recipe | seeds | gate | failed conditions | mean difference | p | cases |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for g in report["groups"]:
        d = g["gate"]
        st = d.get("statistics") or {}
        lines.append(f"| {g['data']} | {g['recipe']} | {g['seeds']} | {'pass' if d['promoted'] else 'fail'} | "
                     f"{', '.join(d.get('failed_conditions') or []) or '-'} | "
                     f"{st.get('mean_difference', float('nan')):+.3f} | {st.get('p_value', float('nan')):.3g} | "
                     f"{d.get('cases', '-')} |")
    lines += ["", f"Wall time {report['seconds'] / 60:.1f} min ({report['created_at']})."]
    return "\n".join(lines) + "\n"


def plot(report: Mapping[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = []
    for i, g in enumerate(report["groups"]):
        labels.append(f"{g['data']}\n{g['recipe']}")
        for j, r in enumerate(g["runs"]):
            s = r["test"]["statistics"]
            iv = s.get("interval") or {}
            x = i + (j - (len(g["runs"]) - 1) / 2) * 0.08
            ax.errorbar([x], [s["mean_difference"]], yerr=[[s["mean_difference"] - iv.get("low", 0)],
                                                           [iv.get("high", 0) - s["mean_difference"]]],
                        fmt="o", color="tab:green" if g["gate"]["promoted"] else "tab:gray", capsize=2)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("test: adapter - base (per seed, 95% CI)")
    ax.set_title(f"{report['reward']}: green = the gate passed")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="the tiny random model (mechanics only)")
    parser.add_argument("--work", type=Path, help="run folders (default ~/.cache/stateset-agents/evidence/)")
    parser.add_argument("--output", type=Path, help="results folder (default benchmarks/results)")
    parser.add_argument("--data", type=Path, default=DATA, help="folder holding tau-airline/")
    parser.add_argument("--threads", type=int,
                        help="torch threads (default: the cores the load average leaves free, read at start)")
    parser.add_argument("--only", help="comma-separated data sources to run (samples, tau-airline)")
    args = parser.parse_args(argv)
    plan = [p for p in PLAN if not args.only or p[0] in args.only.split(",")]
    report = run(plan, fast=args.fast, work=args.work, output=args.output, data_root=args.data,
                 threads=args.threads)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
