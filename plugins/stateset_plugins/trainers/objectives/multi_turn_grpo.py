r"""Multi-turn GRPO: GRPO over whole agent episodes replayed against a recorded conversation.

An episode starts from the prompt (the messages before the curated turn). The agent's turns are sampled; after
each, the recorded conversation continues:

* recorded user turns are replayed as they were;
* a recorded tool result is replayed only while the sampled tool calls match the recorded ones (same names and
  arguments, arguments compared as parsed JSON); at the first divergence (another call, a missing call, a call the
  log never made) the episode ends and is scored as it stands;
* the episode also ends after the recorded conversation, ``max_turns`` (4) agent turns, or ``max_episode_tokens``
  (1024) tokens.

The reward grades every sampled agent turn in context; the episode's reward is their mean. The objective is GRPO's
(see `grpo`), with o_i the episode and the loss (and KL) only on agent tokens: environment tokens are context.

Defaults: ``beta`` 0.04, ``epsilon`` 0.2 (GRPO's).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import RLConfig
from .grpo import GRPO


@dataclass
class MultiTurnGRPOConfig(RLConfig):
    algorithm = "multi_turn_grpo"
    beta: float = 0.04
    epsilon: float = 0.2
    max_turns: int = 4
    max_episode_tokens: int = 1024


class MultiTurnGRPO(GRPO):
    name, stem, Config = "multi_turn_grpo", "MultiTurnGRPO", MultiTurnGRPOConfig
    rollout = "multi_turn"
