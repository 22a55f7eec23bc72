"""CLI start-up: `stateset-agents --help` and `stateset-agents train --help`, against `python -c pass` in the same run.

The design card wants both well under a second (issue 15: under 0.5 s with the example plugins installed). Each
round runs every command once, interleaved, so a busy machine slows all of them alike; the figures are medians over
rounds, and the ratio to the bare interpreter says how much is ours. Bytecode is cached (a warm-up round writes it
under a private PYTHONPYCACHEPREFIX when the environment disables writing it), as an installed package has it.

One more run of each help command under `-X importtime` lists what it imported that it must not: torch and the
other heavy modules, and any plugin module beyond the registrations (a component module means a lazy spec broke).

    python benchmarks/cli_startup.py [--rounds 5] [--output benchmarks/results/cli_startup.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.5
HEAVY = ("torch", "transformers", "peft", "vllm", "pydantic", "docker", "runpod", "modal", "jsonschema")


def _cli() -> list[str]:
    exe = Path(sys.executable).with_name("stateset-agents")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "stateset_agents"]


def commands() -> dict[str, list[str]]:
    cli = _cli()
    return {"python -c pass": [sys.executable, "-c", "pass"], "stateset-agents --help": [*cli, "--help"],
            "stateset-agents train --help": [*cli, "train", "--help"]}


def child_env() -> dict[str, str]:
    env = dict(os.environ, COLUMNS="120")
    if env.pop("PYTHONDONTWRITEBYTECODE", None) and "PYTHONPYCACHEPREFIX" not in env:
        env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "stateset-cli-startup-pycache")
    return env


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imported(cmd: list[str], env: dict[str, str]) -> list[str]:
    """The dotted name of every module `cmd` imports (python -X importtime)."""
    if cmd[0] != sys.executable:  # the console script: run the same entry point under this interpreter
        cmd = [sys.executable, "-m", "stateset_agents", *cmd[1:]]
    out = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], env=env, capture_output=True, text=True)
    return [line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")
            and "|" in line and not line.rstrip().endswith("imported package")]


def forbidden(modules: list[str], registry) -> list[str]:
    """Heavy modules, and the module of any component registered lazily ("module:attr"): listing components
    imports registrations only, never a component."""
    lazy = {spec.target.partition(":")[0] for spec in registry.all() if isinstance(spec.target, str)}
    return sorted({m for m in modules if m.split(".")[0] in HEAVY} | (set(modules) & lazy))


def run(rounds: int = 5) -> dict:
    env = child_env()
    cmds = commands()
    for cmd in cmds.values():  # warm-up: bytecode written, files in the page cache
        _run(cmd, env)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(rounds):
        for name, cmd in cmds.items():
            wall, cpu = _run(cmd, env)
            walls[name].append(round(wall, 4))
            cpus[name].append(round(cpu, 4))
    base = statistics.median(walls["python -c pass"])
    from stateset_agents.core.registry import get_registry

    registry = get_registry(refresh=True)  # what the commands saw: the same environment, the same plugins
    report = {"rounds": rounds, "target_s": TARGET_S, "python": platform.python_version(),
              "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
              "third_party_plugins": sorted({p for p in registry.plugins.values() if p != "stateset-agents"}),
              "commands": {}}
    for name, cmd in cmds.items():
        median = statistics.median(walls[name])
        row = {"wall_s": walls[name], "median_s": round(median, 4),
               "cpu_median_s": round(statistics.median(cpus[name]), 4),
               "ratio_to_python": round(median / base, 2) if base else None}
        if name != "python -c pass":
            row["under_target"] = median < TARGET_S
            row["forbidden_imports"] = forbidden(imported(cmd, env), registry)
        report["commands"][name] = row
    return report


def render(report: dict) -> str:
    lines = ["| command | median wall s | median CPU s | x python -c pass | runs (s) |", "|---|---|---|---|---|"]
    for name, row in report["commands"].items():
        lines.append(f"| `{name}` | {row['median_s']:.3f} | {row['cpu_median_s']:.3f} | {row['ratio_to_python']} | "
                     f"{', '.join(f'{w:.2f}' for w in row['wall_s'])} |")
    lines.append(f"load average {report['load_average']} on {report['cpus']} CPUs; third-party plugins: "
                 f"{', '.join(report['third_party_plugins']) or 'none'}")
    for name, row in report["commands"].items():
        if row.get("forbidden_imports"):
            lines.append(f"{name} imported: {', '.join(row['forbidden_imports'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "cli_startup.json")
    args = parser.parse_args(argv)
    report = run(args.rounds)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(args.output)
    print(render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
