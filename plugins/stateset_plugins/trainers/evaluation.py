"""Held-out evaluation: the base model (adapter disabled) and the adapter answer the same prompts with the same
decoding settings and seed, and the same reward grades both, case by case."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from stateset_agents.components import GradeItem
from stateset_agents.errors import InputError, StatesetError
from stateset_agents.jsonio import read_jsonl
from stateset_agents.pipeline.evaluation_stats import add_statistics
from stateset_agents.stats import paired_totals

from .chat_format import content_text, parse_assistant
from .rundir import seed_everything


def load_eval_prompts(path: str | Path) -> list[dict[str, Any]]:
    """`.txt`: one prompt a line (blank lines skipped). `.jsonl`: ``prompt`` (messages or a string) with optional
    ``metadata`` and ``tools``, or ``messages`` (a trailing assistant message, a reference answer, is dropped)."""
    path = str(path)
    cases: list[dict[str, Any]] = []
    if path.endswith(".txt"):
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise InputError("file not found", path=path) from None
        for number, line in enumerate(lines, start=1):
            if line.strip():
                cases.append({"id": f"line{number}", "prompt": [{"role": "user", "content": line.strip()}],
                              "tools": [], "metadata": {}})
    elif path.endswith((".jsonl", ".jsonl.gz")):
        for number, obj in read_jsonl(path):
            if not isinstance(obj, Mapping):
                raise InputError("each line must be a JSON object", path=path, line=number)
            prompt = obj.get("prompt", obj.get("messages"))
            if isinstance(prompt, str):
                prompt = [{"role": "user", "content": prompt}]
            if not isinstance(prompt, list) or not prompt:
                raise InputError("needs 'prompt' (messages or text) or 'messages'", path=path, line=number,
                                 field="prompt")
            if "prompt" not in obj and prompt[-1].get("role") == "assistant":
                prompt = prompt[:-1]
            cases.append({"id": str(obj.get("id", f"line{number}")), "prompt": prompt,
                          "tools": obj.get("tools") or [], "metadata": obj.get("metadata") or {}})
    else:
        raise InputError("eval prompts must be a .txt (one prompt a line) or .jsonl file", path=path)
    if not cases:
        raise InputError("no evaluation prompts", path=path)
    return cases


def _answers(backend, renderer, reward, cases, config, adapter: bool) -> list[dict[str, Any]]:
    seed_everything(config.seed)  # same seed for base and candidate: paired samples
    prompts = [renderer.prompt_ids(c["prompt"], c["tools"]) for c in cases]
    gens = backend.generate(prompts, max_new_tokens=config.max_new_tokens, temperature=config.temperature,
                            adapter=adapter)
    messages = [parse_assistant(renderer.tokenizer.decode(g.ids, skip_special_tokens=True)) for g in gens]
    items = [GradeItem({"id": f"{c['id']}/{'candidate' if adapter else 'base'}", "messages": [*c["prompt"], m],
                        "tools": c["tools"], "metadata": c["metadata"]}, turns=[len(c["prompt"])])
             for c, m in zip(cases, messages)]
    grades = reward.grade(items)
    identity = reward.identity()
    for g in grades:
        if g.get("reward") != identity:  # base and candidate must be graded by one reward version and config
            raise StatesetError(f"a grade came back from {g.get('reward')}, not from the reward asked for "
                                f"({identity}): refusing to compare scores of different rewards")
    return [{"output": m, "text": content_text(m.get("content")), "score": float(g["score"]),
             "applicable": g.get("applicable", True), "breakdown": g.get("breakdown", {}),
             "reason": g.get("reason", ""), "truncated": bool(gen.truncated)}
            for m, g, gen in zip(messages, grades, gens)]


def evaluate(backend, renderer, reward, cases: Sequence[dict[str, Any]], config) -> dict[str, Any]:
    base = _answers(backend, renderer, reward, cases, config, adapter=False)
    cand = _answers(backend, renderer, reward, cases, config, adapter=True)
    rows = [{"id": c["id"], "prompt": c["prompt"], "base": b, "candidate": a, "difference": a["score"] - b["score"]}
            for c, b, a in zip(cases, base, cand)]
    totals = paired_totals([r["base"]["score"] for r in rows], [r["candidate"]["score"] for r in rows])
    results = {"reward": reward.identity(),
               "decoding": {"temperature": config.temperature, "max_new_tokens": config.max_new_tokens,
                            "seed": config.seed},
               "totals": totals, "cases": rows}
    return add_statistics(results)  # interval, p-value, truncation and regressions: the one statistics module
