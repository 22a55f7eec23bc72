r"""RLAIF: reinforcement learning from AI feedback (Bai et al., 2022, "Constitutional AI", arXiv:2212.08073; Lee et
al., 2023, arXiv:2309.00267): the reward is a judge model's score of each completion against a rubric.

    r_i = Score_judge(rubric, q, o_i) / max_score    (the judge's "Score: N", see `models.judge`)

and the policy objective is GRPO's (see `grpo`): group-relative advantages, clipped token ratios, per-sequence
aggregation, beta * k3 KL to the reference.

Judge fields: ``judge_model`` (a local causal LM: path, .gguf or hub id) or ``judge_url`` (an OpenAI-compatible
endpoint; ``judge_name`` the model name sent to it, "judge"), exactly one; ``rubric`` (a text file; default: a short
customer-support rubric), ``judge_max_new_tokens`` (64), ``judge_max_score`` (10). Verdicts are cached on disk in
the run directory by content hash. Defaults otherwise GRPO's: ``beta`` 0.04, ``epsilon`` 0.2. This is a trainer
only: `improve run` keeps its offline rewards.
"""
from __future__ import annotations

from dataclasses import dataclass

from stateset_agents.core.errors import InputError

from ..config import RLConfig
from .grpo import GRPO


@dataclass
class RLAIFConfig(RLConfig):
    algorithm = "rlaif"
    beta: float = 0.04
    epsilon: float = 0.2
    judge_model: str | None = None
    judge_url: str | None = None
    judge_name: str = "judge"
    rubric: str | None = None
    judge_max_new_tokens: int = 64
    judge_max_score: float = 10.0

    def __post_init__(self):
        super().__post_init__()
        if self.judge_model and self.judge_url:
            raise InputError("rlaif needs exactly one judge: judge_model (--judge-model) or judge_url (--judge-url)",
                             field="judge_model")
        if self.judge_max_new_tokens < 1 or not self.judge_max_score > 0:
            raise InputError("judge_max_new_tokens and judge_max_score must be positive",
                             field="judge_max_new_tokens")

    def require_judge(self) -> None:
        """Called before a run (the config alone may be built without one, e.g. to read its defaults)."""
        if not (self.judge_model or self.judge_url):
            raise InputError("rlaif needs a judge: judge_model (--judge-model) or judge_url (--judge-url)",
                             field="judge_model")


class RLAIF(GRPO):
    """GRPO's policy objective with a judge model's rubric score as the reward; verdicts are cached in
    RUN/judge_cache.jsonl (in memory without an output directory)."""

    name, stem, Config = "rlaif", "RLAIF", RLAIFConfig
    ddp_loss = None  # the judge and its cache in the run directory are one process's
    builds_reward = True

    def check_config(self, config: RLAIFConfig) -> None:
        config.require_judge()

    def build_reward(self, config: RLAIFConfig, run_dir):
        from stateset_plugins.models.judge import JudgeReward

        return JudgeReward.from_config(config, run_dir.path / "judge_cache.jsonl" if run_dir else None)
