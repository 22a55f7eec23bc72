"""The engine conformance check: `python -m stateset_plugins.engines.conformance verl|openrlhf`.

It renders a small plan with the adapter, starts our scorer, and runs the engine's own code in the engine's venv
(`engine_side/*_check.py`): verl's config classes and reward manager, OpenRLHF's argument parser, prompt format and
remote-reward client. It passes when the engine accepted the rendered inputs and scored every case with exactly
the score our reward gives the same conversation. An adapter pins the engine version this passed on.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from stateset_agents.core.components import GradeItem
from stateset_agents.core.errors import StatesetError

#: gsm8k rows and replies that the reward scores differently (right, wrong, no answer)
SAMPLE_ROWS = [
    {"prompt": [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "What is 6 * 7?"}],
     "completion": {"role": "assistant", "content": "#### 42"}, "metadata": {"reference_answer": "42"}},
    {"prompt": [{"role": "user", "content": "Tom has 3 apples and buys 5 more. How many?"}],
     "completion": {"role": "assistant", "content": "The answer is 8"}, "metadata": {"reference_answer": "8"}},
    {"prompt": [{"role": "user", "content": "What is 10 - 4?"}],
     "completion": {"role": "assistant", "content": "#### 6"}, "metadata": {"reference_answer": "6"}},
]
SAMPLE_CASES = [{"index": 0, "response": "6 times 7 is 42.\n#### 42"}, {"index": 1, "response": "#### 9"},
                {"index": 2, "response": "The answer is 6"}, {"index": 0, "response": "I am not sure."}]
SCRIPTS = {"verl": "verl_check.py", "openrlhf": "openrlhf_check.py"}


def write_sample(path: Path, rows=SAMPLE_ROWS) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def expected_scores(reward, rows, cases) -> list[float]:
    """What our reward gives each case's conversation, graded directly (no engine, no server); the reply is
    parsed as the native trainer parses a sample."""
    from stateset_plugins.models.chat_format import parse_assistant

    items = [GradeItem({"id": f"case{i}", "messages": [*rows[c["index"]]["prompt"], parse_assistant(c["response"])],
                        "tools": [], "metadata": rows[c["index"]].get("metadata") or {}}, turns=None)
             for i, c in enumerate(cases)]
    return [float(r["score"]) for r in reward.grade(items)]


def check(engine: str, workdir: Path, *, python: str | None = None, config: dict | None = None,
          rows=SAMPLE_ROWS, cases=SAMPLE_CASES, reward_name: str = "reward:gsm8k",
          algorithms: tuple[str, ...] = ("grpo",), base_model: str | None = None) -> dict[str, Any]:
    """Render, then let the engine's own code read and score it; the engine's answers and ours, side by side."""
    from stateset_agents.core.runtimes import load_component

    from .component import ENGINE_DIR, OpenRLHFTrainer, VerlTrainer
    from .pins import require_engine
    from .render import keyed_rows
    from .scorer import Grader, ScorerServer

    trainer_cls = {"verl": VerlTrainer, "openrlhf": OpenRLHFTrainer}[engine]
    py = require_engine(engine, python)
    # enough prompts for a batch of the default 8-GPU layout (OpenRLHF checks samples per actor process)
    rows = list(rows) * max(1, -(-16 // len(rows)))
    dataset = write_sample(workdir / "dataset.jsonl", rows)
    if base_model is None:  # the engines' config classes read the model's config: a tiny one, built offline
        from stateset_plugins.models.tiny import build_tiny_model

        base_model = str(build_tiny_model(workdir / "tiny-model"))
    renders = {}
    for algorithm in algorithms:  # the first is scored; every one is read by the engine's own code
        request = {"dataset": str(dataset), "reward": reward_name, "base_model": base_model,
                   "output": str(workdir / f"run-{algorithm}"), "seed": 7, "steps": 2,
                   "config": {"render_only": True, "engine_python": str(py), "engine_algorithm": algorithm,
                              **(config or {})}}
        events = list(trainer_cls().run(request))
        if events[-1].get("type") != "completed":
            raise StatesetError(f"rendering {algorithm} failed: {events[-1].get('message')}")
        renders[algorithm] = (workdir / f"run-{algorithm}" / ENGINE_DIR, events[-1]["experiment_digest"])
    out, digest = renders[algorithms[0]]
    with load_component(reward_name, runtime="inprocess") as reward:
        expected = expected_scores(reward, rows, cases)
        grader = Grader(keyed_rows(rows), reward, digest, log=out / "conformance_scores.jsonl")
        with ScorerServer(grader) as scorer:
            spec = {"render_dir": str(out), "cases": cases, "batch": cases, "remote_url": scorer.openrlhf_url,
                    "also": {alg: str(renders[alg][0]) for alg in algorithms[1:]}}
            (workdir / "cases.json").write_bytes(orjson.dumps(spec))
            script = Path(__file__).with_name("engine_side") / SCRIPTS[engine]
            proc = subprocess.run([str(py), str(script), str(workdir / "cases.json")], capture_output=True,
                                  text=True, timeout=600,
                                  env={"STATESET_AGENTS_SCORER_URL": scorer.url,
                                       "STATESET_AGENTS_SCORER_TOKEN": scorer.token, "PATH": "/usr/bin:/bin",
                                       "HOME": str(workdir), "HYDRA_FULL_ERROR": "1",
                                       "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        raise StatesetError(f"{engine}'s own code refused the rendered run (exit {proc.returncode}):\n"
                            + "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-25:]))
    answer = orjson.loads(proc.stdout.strip().splitlines()[-1])
    got = answer["scores"] + answer.get("batch_scores", [])
    want = expected + (expected if engine == "openrlhf" else [])
    return {"engine": engine, "experiment_digest": digest, "answer": answer, "expected": expected,
            "ok": got == want, "render_dir": str(out), "digests": {alg: d for alg, (_, d) in renders.items()}}


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if not args or args[0] not in SCRIPTS:
        print(f"usage: python -m stateset_plugins.engines.conformance {'|'.join(SCRIPTS)} [ENGINE_PYTHON]")
        return 2
    with tempfile.TemporaryDirectory(prefix="stateset-engine-check-") as tmp:
        algorithms = ("grpo", "ppo", "gspo", "dapo")
        result = check(args[0], Path(tmp), python=args[1] if len(args) > 1 else None, algorithms=algorithms)
    answer = result["answer"]
    print(orjson.dumps({k: result[k] for k in ("engine", "ok", "expected")} | {"engine_answer": answer},
                       option=orjson.OPT_INDENT_2).decode())
    print(("pass" if result["ok"] else "FAIL") + f": {args[0]} {answer.get(args[0])}")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
