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
from .common import group_advantages, policy_loss

NAME = "multi_turn_grpo"
ROLLOUT = "multi_turn"


@dataclass
class MultiTurnGRPOConfig(RLConfig):
    algorithm = NAME
    beta: float = 0.04
    epsilon: float = 0.2
    max_turns: int = 4
    max_episode_tokens: int = 1024


Config = MultiTurnGRPOConfig  # every objective module exposes `Config`


def advantages(rewards, group_size: int, config: MultiTurnGRPOConfig):
    return group_advantages(rewards, group_size, config.scale_rewards)


def loss(new_logp, batch, config: MultiTurnGRPOConfig):
    return policy_loss(new_logp, batch, config.beta, config.epsilon, config.epsilon, token_level=False)
