"""The whole loop on the sample logs that ship in the package: ingest -> improve -> train (GRPO) -> held-out
evaluation. Each step is the same call the individual commands make; the quickstart only chains them."""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from ..errors import StatesetError
from ..runtimes import load_component
from .improve import run_improve
from .ingest import run_ingest

REWARD = "customer_support"
MARKER = ".stateset-quickstart"

#: Sized for a 2-core CPU, where SmolLM2-135M reads a ~400-token support prompt at roughly 100 tokens/s: six
#: updates of one prompt x 4 samples, then 16 held-out prompts answered twice, stay under 15 minutes.
FULL = {"base_model": None, "steps": 6, "config": {"num_generations": 4, "batch_size": 1, "max_new_tokens": 40,
                                                   "learning_rate": 5e-5, "save_every": 3}}
#: `--fast`: a tiny random model, for a one-minute tour of the files.
FAST = {"base_model": "tiny-random", "steps": 4, "config": {"num_generations": 4, "batch_size": 2,
                                                            "max_new_tokens": 16, "learning_rate": 1e-3,
                                                            "save_every": 2}}


def sample_path(name: str) -> Path:
    return Path(str(resources.files("stateset_agents.samples").joinpath(name)))


@dataclass
class QuickstartResult:
    workdir: Path
    ingest: dict[str, Any] = field(default_factory=dict)
    improve: dict[str, Any] = field(default_factory=dict)
    train: dict[str, Any] = field(default_factory=dict)
    first_reward: float | None = None
    last_reward: float | None = None


def run_quickstart(workdir: str | Path, *, fast: bool = False, overwrite: bool = False,
                   on_step: Callable[[str], None] | None = None,
                   on_event: Callable[[dict[str, Any]], None] | None = None) -> QuickstartResult:
    work = Path(workdir)
    if work.exists() and any(work.iterdir()):
        # An earlier quickstart's folder (it carries our marker) is replaced; anything else needs --overwrite.
        if not overwrite and not (work / MARKER).exists():
            raise StatesetError(f"{work} already holds files; pass --overwrite to replace them or choose --output")
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    (work / MARKER).write_text("made by `stateset-agents quickstart`; the next quickstart replaces this folder\n")
    preset = FAST if fast else FULL
    result = QuickstartResult(work)
    step = on_step or (lambda _msg: None)

    step("ingest: sample support logs -> transcripts")
    result.ingest = run_ingest("openai", str(sample_path("support_logs.jsonl")), work / "ingested")

    step(f"improve: grade every assistant turn with reward:{REWARD}, curate the good ones")
    result.improve = run_improve(work / "ingested", REWARD, work / "improved", held_out_fraction=0.0)

    step("train: GRPO on the curated prompts, then answer the held-out prompts with base and adapter")
    request = {"algorithm": "grpo", "dataset": str(work / "improved" / "curated.jsonl"), "reward": REWARD,
               "base_model": preset["base_model"], "eval_prompts": str(sample_path("held_out.jsonl")),
               "output": str(work / "runs" / "grpo"), "steps": preset["steps"], "seed": 0,
               "config": dict(preset["config"])}
    with load_component("trainer:grpo") as trainer:
        for event in trainer.run(request):
            if event.get("type") == "metrics":
                reward = (event.get("metrics") or {}).get("reward_mean")
                if reward is not None:
                    result.first_reward = reward if result.first_reward is None else result.first_reward
                    result.last_reward = reward
            if on_event:
                on_event(event)
            result.train = event
    if result.train.get("type") != "completed":
        raise StatesetError(f"quickstart training failed: {result.train.get('message') or result.train}")
    return result
