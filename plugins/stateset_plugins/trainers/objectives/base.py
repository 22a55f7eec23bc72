"""`Objective`: one training algorithm on the shared engine.

An objective is a class: identity and kind as class attributes, the algorithm as methods. Every hook the engine
calls has a default here, so a subclass writes only what differs from GRPO's group-relative recipe (usually `loss`,
often `advantages`). Methods receive the training config (an instance of ``Config``) explicitly. The trainers plugin
wraps each registered objective in one generic `trainer:NAME` component (`trainers.components`).

This module imports no torch: the trainers plugin names objectives lazily, and `plugins list` must stay light.
"""
from __future__ import annotations

from typing import Any, ClassVar

from .._version import VERSION
from ..config import RLConfig, TrainConfig

ROLLOUTS = ("none", "single_turn", "multi_turn")


class Objective:
    """Subclass, set the class attributes, override the hooks that differ.

    Class attributes:

    * ``name``, ``version``: the algorithm's name (``--algorithm NAME``, ``trainer:NAME``) and version; both must
      equal what its plugin registers.
    * ``stem``: the class-name stem of its Python face (``GSPO`` gives ``GSPOTrainer``, ``GSPOConfig`` and
      ``train_with_gspo`` in `stateset_agents.training.gspo_trainer`); default: ``name`` in CamelCase.
    * ``Config``: its configuration dataclass (a `TrainConfig`; sampling objectives an `RLConfig` or
      `ValueConfig`), named ``<stem>Config``.
    * ``rollout``: "none" (SFT: the curated completions are the batch), "single_turn" or "multi_turn" (agent turns
      against the recorded user turns and tool results).
    * ``value_head``: True for critics (PPO, VAPO): the backend adds a value head, the engine calls `prepare` and
      passes the head's values to `loss` as a fourth argument, and `value_loss` trains it.
    * ``builds_reward``: True when the objective makes its own reward from its config (`build_reward`; RLAIF's
      judge): a reward component is then refused.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = VERSION  # the trainers plugin's; a third party's objective sets its own
    stem: ClassVar[str] = ""
    Config: ClassVar[type[TrainConfig]] = RLConfig
    rollout: ClassVar[str] = "single_turn"
    value_head: ClassVar[bool] = False
    builds_reward: ClassVar[bool] = False
    #: What the loss is a mean over, so N ranks (`train --nproc`) can weight their gradients into the global batch's:
    #: "rows" (a mean of per-sequence values), "tokens" (a mean over the batch's sampled tokens), or None: the
    #: objective uses whole-batch statistics and runs on one process only. Declared per class, never guessed.
    ddp_loss: ClassVar[str | None] = None
    #: True when the loss is linear in the log-probs (its gradient with respect to them does not depend on them: SFT's
    #: likelihood). ``update_rows`` then accumulates gradients chunk by chunk with no extra forward pass.
    #: Declared, never guessed: a wrong True gives a wrong gradient.
    linear_in_logprobs: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.rollout not in ROLLOUTS:
            raise TypeError(f"{cls.__qualname__}.rollout must be one of {', '.join(ROLLOUTS)}, got {cls.rollout!r}")

    # ------------------------------------------------------------------------------------------ identity
    @classmethod
    def class_stem(cls) -> str:
        return cls.stem or "".join(part.capitalize() for part in cls.name.split("_"))

    # ------------------------------------------------------------------------------------ before a run
    def check_config(self, config: TrainConfig) -> None:
        """Refuse a config that cannot run (raise `InputError`), before any model loads. Default: nothing more
        than the dataclass's own checks."""

    def build_reward(self, config: TrainConfig, run_dir) -> Any:
        """The reward of an objective with ``builds_reward`` (``run_dir``: a `RunDir` or None, for caches)."""
        raise NotImplementedError(f"{type(self).__name__} sets builds_reward but does not define build_reward")

    # ------------------------------------------------------------------------------------- sampling
    def sampling_rounds(self, config: TrainConfig) -> int:
        """At most this many rollouts per update, to fill the batch with groups `keep_group` keeps. Default 1."""
        return 1

    def shape_rewards(self, rewards, lengths, truncated, config: TrainConfig):
        """One group's rewards [G] after shaping, given each completion's sampled length and whether it was cut
        at ``max_new_tokens``. Default: unchanged."""
        return rewards

    def keep_group(self, rewards, config: TrainConfig) -> bool:
        """Whether a group (its shaped rewards [G]) enters the batch. Default: every group does."""
        return True

    def advantages(self, rewards, group_size: int, config: TrainConfig):
        """Per-sample advantages [N] from the batch's rewards [N] (groups contiguous). Default: GRPO's
        group-relative A_i = (r_i - mean) / std (only centred without ``config.scale_rewards``; the std over n or
        n - 1 as ``config.advantage_std`` says)."""
        from .common import group_advantages

        return group_advantages(rewards, group_size, config.scale_rewards,
                                unbiased=getattr(config, "advantage_std", "population") == "sample")

    def prepare(self, batch, backend, config: TrainConfig) -> dict[str, float]:
        """After advantages and reference log-probs, before the update (critics: values and GAE); returns metrics
        for the step's record. Default: nothing."""
        return {}

    # ------------------------------------------------------------------------------------------ update
    def loss(self, new_logp, batch, config: TrainConfig, values=None):
        """``(loss, stats)`` for the update: ``new_logp`` [N, C] the policy's log-probs of the completion tokens,
        ``batch`` a `Batch` (masks, behaviour and reference log-probs, rewards, advantages), ``values`` [N, C]
        the value head's output (critics only). Every objective defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define loss(new_logp, batch, config)")

    def value_loss(self, values, batch, config: TrainConfig):
        """``(loss, stats)`` of the value head alone (VAPO's value pre-training); critics define it."""
        raise NotImplementedError(f"{type(self).__name__} has no value head")

    def value_pretrain_steps(self, config: TrainConfig) -> int:
        """Updates of the value head alone before the first policy update. Default 0."""
        return 0
