"""The promotion gate: several training runs of one configuration, differing only in seed, evaluated paired on the
same held-out cases. The pairing unit is the case: a case's difference is its mean over the runs, so seed noise
averages out before the test and no case counts more than once.

It passes only when all of these hold, and `promotion.json` says which failed:

* ``same_configuration``: one algorithm, config (seed aside), dataset and base model across the runs;
* ``min_seeds``: at least `min_seeds` distinct seeds (default 6); one run's gain is descriptive only;
* ``significant_gain``: mean difference > 0 with a two-sided sign-flip p-value below `alpha` (default 0.05);
* ``no_case_regression``: no case's mean score fell by more than `tolerance` (default 0.2).

On a test file (its rows say ``split: test``) the gate reads, for each run, the recorded test result of its
nominated checkpoint (`nomination.test_results`: `nominate`, then `evaluate --run RUN --split test`) and evaluates
nothing itself: the test split is looked at once per checkpoint, through the ledger. On other prompts each run's
final adapter is evaluated through the paired evaluator (the one declaring `paired`), which reuses the run's own
eval_results.json when its cases, reward and protocol are those asked for, and evaluates afresh otherwise.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..core._version import __version__
from ..core.errors import InputError, PluginError
from ..core.jsonio import digest, load_json, sha256_file, write_json
from ..plugin_api import stats
from ..plugin_api.checkpoints import refuse_quarantined
from ..plugin_api.lineage import seal
from ..plugin_api.splits import TEST, file_role
from .lineage import MANIFEST, PROMOTION

SCHEMA_VERSION = 1
DEFAULT_MIN_SEEDS = 6
DEFAULT_ALPHA = 0.05
DEFAULT_TOLERANCE = 0.2
STATISTICS_SEED = 0


def _configuration(manifest: Mapping[str, Any]) -> dict[str, Any]:
    config = {k: v for k, v in (manifest.get("config") or {}).items() if k != "seed"}
    return {"algorithm": manifest.get("algorithm"), "config_without_seed": digest(config),
            "dataset_sha256": (manifest.get("dataset") or {}).get("sha256"),
            "base_model": digest(manifest.get("base_model") or {})}


def _read_run(path: Path) -> dict[str, Any]:
    manifest_path = path / MANIFEST
    refuse_quarantined(path, "gated")
    manifest = load_json(manifest_path)
    if manifest.get("status") != "completed":
        raise InputError(f"the run did not complete (status {manifest.get('status')!r}); only completed runs can "
                         "be gated", path=str(path))
    if not (path / "adapter").is_dir():
        raise InputError("the run has no adapter/ directory", path=str(path))
    return {"path": path, "manifest": manifest, "manifest_sha256": sha256_file(manifest_path)}


def _evaluate(run: Mapping[str, Any], prompts: str, reward: str, reward_config, reward_runtime: str,
              evaluator_runtime: str, output: Path, on_event: Callable | None) -> dict[str, Any]:
    from ..core.registry import get_registry
    from ..core.runtimes import load_component

    evaluator_name = get_registry().offering("evaluator", "paired").full_name
    request = {"prompts": prompts, "adapter": str(run["path"] / "adapter"), "reward": reward,
               "reward_config": dict(reward_config or {}), "reward_runtime": reward_runtime,
               "output": str(output), "reuse": str(run["path"] / "eval_results.json")}
    last: dict[str, Any] = {}
    with load_component(evaluator_name, runtime=evaluator_runtime) as evaluator:
        for event in evaluator.run(request):
            last = event
            if on_event:
                on_event(run, event)
    if last.get("type") != "completed":
        raise PluginError(evaluator_name, "run", f"evaluating {run['path']}: "
                                                 f"{last.get('message') or 'no completed event'}")
    return last["results"]


def _nominated_test_results(loaded, prompts, reward: str, reward_config, reward_runtime: str,
                            output: Path) -> list[dict[str, Any]]:
    """Each run's recorded test look at its nominated checkpoint, copied (byte for byte) beside the promotion
    record; the reward must be the one asked for."""
    import shutil

    from ..core.runtimes import load_component
    from .nomination import test_results

    full = reward if ":" in reward else f"reward:{reward}"
    with load_component(full, config=dict(reward_config or {}), runtime=reward_runtime) as grader:
        identity = grader.identity()
    prompts_sha = sha256_file(prompts)
    evaluations = []
    for i, run in enumerate(loaded):
        found = test_results(run["path"], prompts_sha)
        results = found["results"]
        if results.get("reward") != identity:
            raise InputError(f"the test look was graded by {_identity(results.get('reward'))}, the gate asks for "
                             f"{_identity(identity)}", path=found["look"]["results"])
        target = output / "evaluations" / f"{i:02d}-{run['path'].name}"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found["look"]["results"], target / "eval_results.json")
        results["nominated_checkpoint"] = {"step": found["nomination"]["step"],
                                           "adapter_sha256": found["nomination"]["adapter"]["sha256"],
                                           "look_at": found["look"]["at"], "again": found["look"]["again"]}
        evaluations.append(results)
    return evaluations


def _same_reward(evaluations: Sequence[Mapping[str, Any]], run_paths: Sequence[Path]) -> None:
    """Scores of different reward versions or configs (a changed rule, another policy, a calibration) are not on
    one scale: refuse to pool them rather than report a difference the reward made."""
    first = evaluations[0].get("reward")
    if not first:
        raise InputError("the evaluation records no reward identity", path=str(run_paths[0]))
    for path, ev in zip(run_paths[1:], evaluations[1:]):
        other = ev.get("reward")
        if other != first:
            raise InputError(f"this run was graded by {_identity(other)}, the first run by {_identity(first)}; the "
                             "gate compares results of one reward version and config only", path=str(path))


def _identity(reward: Mapping[str, Any] | None) -> str:
    reward = reward or {}
    return (f"{reward.get('name')} {reward.get('version')} (config "
            f"{str(reward.get('config_sha256') or '')[:12]})")


def _case_table(evaluations: Sequence[Mapping[str, Any]], run_paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Per case: base and candidate score of every run, and the means over runs (the gate's paired unit)."""
    keys = [[(str(c["id"]), digest(c.get("prompt"))) for c in ev["cases"]] for ev in evaluations]
    for path, k in zip(run_paths[1:], keys[1:]):
        if k != keys[0]:
            raise InputError("this run was evaluated on different cases than the first run (split isolation may "
                             "have dropped different cases); gate runs on identical cases", path=str(path))
    table = []
    for i, case in enumerate(evaluations[0]["cases"]):
        base = [float(ev["cases"][i]["base"]["score"]) for ev in evaluations]
        cand = [float(ev["cases"][i]["candidate"]["score"]) for ev in evaluations]
        table.append({"id": case["id"], "base_mean": stats.mean(base), "candidate_mean": stats.mean(cand),
                      "difference": stats.mean(cand) - stats.mean(base),
                      "per_run_difference": [c - b for b, c in zip(base, cand)]})
    return table


def decide(runs: Sequence[Mapping[str, Any]], table: Sequence[Mapping[str, Any]], *, min_seeds: int, alpha: float,
           tolerance: float) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """The four conditions, the statistics over case means, and the cases that regressed past the tolerance."""
    conditions = []
    configs = [_configuration(r["manifest"]) for r in runs]
    differing = sorted({k for c in configs for k in c if c[k] != configs[0][k]})
    conditions.append({"name": "same_configuration", "passed": not differing,
                       "detail": "the runs differ only in seed" if not differing else
                       f"the runs differ in more than the seed: {', '.join(differing)}"})
    seeds = sorted({r["manifest"].get("seed") for r in runs}, key=str)
    conditions.append({"name": "min_seeds", "passed": len(seeds) >= min_seeds,
                       "detail": f"{len(seeds)} distinct seed(s) {seeds}, {min_seeds} required" +
                       ("" if len(runs) > 1 else "; one run's gain is descriptive only")})
    statistics = stats.paired_comparison([c["base_mean"] for c in table], [c["candidate_mean"] for c in table],
                                         seed=STATISTICS_SEED)
    gain = statistics["mean_difference"] > 0 and statistics["p_value"] < alpha
    conditions.append({"name": "significant_gain", "passed": gain,
                       "detail": f"mean difference {statistics['mean_difference']:+.4f}, "
                                 f"p = {statistics['p_value']:.4g} ({'<' if statistics['p_value'] < alpha else '>='} "
                                 f"alpha {alpha})"})
    fell = sorted((c for c in table if c["difference"] < -tolerance), key=lambda c: c["difference"])
    conditions.append({"name": "no_case_regression", "passed": not fell,
                       "detail": "no case fell by more than the tolerance" if not fell else
                       f"{len(fell)} case(s) fell by more than {tolerance}: " +
                       ", ".join(f"{c['id']} ({c['difference']:+.3f})" for c in fell[:10])})
    return conditions, statistics, [dict(c) for c in fell]


def run_gate(runs: Sequence[str | Path], prompts: str | Path, reward: str, output: str | Path, *,
             min_seeds: int = DEFAULT_MIN_SEEDS, alpha: float = DEFAULT_ALPHA, tolerance: float = DEFAULT_TOLERANCE,
             reward_config: Mapping[str, Any] | None = None, reward_runtime: str = "inprocess",
             evaluator_runtime: str = "inprocess", on_event: Callable | None = None) -> dict[str, Any]:
    """Evaluate every run, decide, write OUTPUT/promotion.json (and, when promoted, RUN/promotion.json in each
    run, which `deploy` looks for). Returns the promotion record."""
    if min_seeds < 2:
        raise InputError("--min-seeds must be at least 2: one run's gain is descriptive only", field="min_seeds")
    if not 0 < alpha < 1:
        raise InputError("--alpha must lie in (0, 1)", field="alpha")
    if tolerance < 0:
        raise InputError("--tolerance must be >= 0", field="tolerance")
    if not runs:
        raise InputError("no runs given", field="runs")
    paths = [Path(r) for r in runs]
    if len({p.resolve() for p in paths}) != len(paths):
        raise InputError("a run is given twice", field="runs")
    loaded = [_read_run(p) for p in paths]
    if not Path(prompts).exists():
        raise InputError("file not found", path=str(prompts))
    output = Path(output)
    on_test = file_role(prompts) == TEST
    if on_test:
        evaluations = _nominated_test_results(loaded, prompts, reward, reward_config, reward_runtime, output)
    else:
        evaluations = [_evaluate(run, str(prompts), reward, reward_config, reward_runtime, evaluator_runtime,
                                 output / "evaluations" / f"{i:02d}-{run['path'].name}", on_event)
                       for i, run in enumerate(loaded)]
    _same_reward(evaluations, paths)
    table = _case_table(evaluations, paths)
    conditions, statistics, fell = decide(loaded, table, min_seeds=min_seeds, alpha=alpha, tolerance=tolerance)
    failed = [c["name"] for c in conditions if not c["passed"]]
    record = seal({
        "schema_version": SCHEMA_VERSION,
        "promoted": not failed,
        "failed_conditions": failed,
        "conditions": conditions,
        "criteria": {"min_seeds": min_seeds, "alpha": alpha, "tolerance": tolerance},
        "reward": evaluations[0].get("reward"),
        "prompts": {"path": str(prompts), "sha256": sha256_file(prompts), "cases": len(table),
                    "split": TEST if on_test else file_role(prompts)},
        "evidence": ("recorded test looks of nominated checkpoints" if on_test else
                     "final adapters evaluated on these prompts"),
        "configuration": _configuration(loaded[0]["manifest"]),
        "runs": [{"path": str(run["path"]), "run_id": run["manifest"].get("run_id"),
                  "seed": run["manifest"].get("seed"), "manifest_sha256": run["manifest_sha256"],
                  "adapter_sha256": (run["manifest"].get("adapter") or {}).get("sha256"),
                  "eval_results_sha256": sha256_file(output / "evaluations" / f"{i:02d}-{run['path'].name}" /
                                                     "eval_results.json"),
                  "reused_run_evaluation": bool(ev.get("reused_from")),
                  "nominated_checkpoint": ev.get("nominated_checkpoint"),
                  "descriptive": {k: (ev.get("statistics") or {}).get(k)
                                  for k in ("mean_difference", "interval", "p_value")}}
                 for i, (run, ev) in enumerate(zip(loaded, evaluations))],
        "statistics": statistics,
        "regressions": fell,
        "cases": sorted(table, key=lambda c: (c["difference"], str(c["id"]))),
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "stateset_agents": __version__,
    })
    write_json(output / PROMOTION, record)
    if record["promoted"]:
        for run in loaded:
            write_json(run["path"] / PROMOTION, record)
    return record
