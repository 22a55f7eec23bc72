"""Toy rewards, a tiny model builder and toy data for the training tests (importable by subprocess runs too)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from stateset_agents import Reward, TurnGrade
from stateset_plugins.models.tiny import build_tiny_model  # noqa: F401 - re-exported for tests


def _text(message) -> str:
    return message.get("content") or ""


class DigitReward(Reward):
    """Learnable by a random tiny model: the share of the reply's characters that are digits."""

    name = "toy_digits"
    version = "1.0"

    def grade_turn(self, conversation, turn_index):
        if os.environ.get("TOY_REWARD_SLEEP"):
            time.sleep(float(os.environ["TOY_REWARD_SLEEP"]))
        text = _text(conversation["messages"][turn_index])
        digits = sum(c.isdigit() for c in text)
        score = digits / len(text) if text else 0.0
        return TurnGrade(score=score, breakdown={"digits": digits, "chars": len(text)}, reason="digit share")


class ToolCallReward(Reward):
    """1 when the turn calls the tool named in metadata['expected_tool'], else 0."""

    name = "toy_tool"
    version = "1.0"

    def grade_turn(self, conversation, turn_index):
        calls = conversation["messages"][turn_index].get("tool_calls") or []
        want = (conversation.get("metadata") or {}).get("expected_tool")
        hit = any(c["function"]["name"] == want for c in calls)
        return TurnGrade(score=1.0 if hit else 0.0, breakdown={"called": [c["function"]["name"] for c in calls]})


class NaNReward:
    """Duck-typed reward that breaks the contract: a NaN score (the engine must catch it)."""

    def identity(self):
        return {"name": "nan", "version": "0", "config_sha256": "0"}

    def grade(self, items):
        return [{"score": float("nan"), "applicable": True, "breakdown": {}, "reason": ""} for item in items
                for _ in item.turns]


def make_rows(n: int = 6) -> list[dict]:
    prompts = ["say a number", "what is 2 + 3", "my order A1 has not arrived", "please refund order 42",
               "hello", "thanks"]
    rows = []
    for i in range(n):
        p = prompts[i % len(prompts)]
        rows.append({"prompt": [{"role": "user", "content": p}],
                     "completion": {"role": "assistant", "content": f"the answer is {i}"},
                     "tools": [], "score": 1.0, "metadata": {},
                     "lineage": {"conversation_id": f"c{i}", "source_path": "logs/a.jsonl",
                                 "source_sha256": "ab" * 32, "line": i + 1, "turn_index": 1}})
    return rows


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


#: Small settings that keep a trainer test to seconds on the tiny model.
FAST = {"max_new_tokens": 8, "batch_size": 2, "num_generations": 4, "learning_rate": 2e-2, "save_every": 2}


def trainer_factory(tiny_model_dir):
    """`build(algo, output_dir, reward=..., dataset=..., **config)`: a trainer on a freshly loaded tiny model, with
    the toy digit reward and rows unless given (rlaif scores with its judge, so it gets no reward by default)."""
    def build(algo="grpo", output=None, *, reward=None, dataset=None, eval_prompts=None, resume=False,
              overwrite=False, **config):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from stateset_plugins.trainers.api import TRAINERS

        cfg = {**FAST, **config}
        if algo == "sft":
            cfg.pop("num_generations", None)
        if reward is None and algo != "rlaif":
            reward = DigitReward()
        return TRAINERS[algo](AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                              AutoTokenizer.from_pretrained(tiny_model_dir), reward=reward,
                              dataset=dataset if dataset is not None else make_rows(), config=cfg,
                              output_dir=output, eval_prompts=eval_prompts, resume=resume, overwrite=overwrite,
                              base_model_info={"source": "local", "path": str(tiny_model_dir)})
    return build
