"""Test-only rewards for grading on worker processes and Ray (tests/improve/test_workers.py, test_ray.py), loaded
through STATESET_AGENTS_PLUGIN_MODULES so every worker finds them.

`improve_fault` grades as `improve_toy` and, per `config.policy`:
* `pids`: a file each instance appends its process id to (how often, and where, the reward was loaded);
* `die_at` with `marker`: grading conversation `die_at`, the worker kills its own process (SIGKILL: no cleanup, no
  answer), once: it writes `marker` first, and a process that finds the marker grades normally. With `always`, it
  dies every time.
"""
from __future__ import annotations

import os
import signal

from stateset_agents import hookimpl

from tests.improve.improve_toy_reward import ToyReward


class FaultReward(ToyReward):
    name, version = "improve_fault", "1.0.0"

    def __init__(self, config=None):
        super().__init__(config)
        policy = self.config.get("policy") or {}
        self.die_at, self.marker, self.always = policy.get("die_at"), policy.get("marker"), policy.get("always")
        if policy.get("pids"):
            with open(policy["pids"], "a") as f:
                f.write(f"{os.getpid()}\n")

    def grade_conversation(self, conversation, turns):
        if self.die_at is not None and conversation["id"] == self.die_at:
            if self.always or not os.path.exists(self.marker):
                with open(self.marker, "w") as f:
                    f.write(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
        return super().grade_conversation(conversation, turns)


@hookimpl
def register_rewards(register):
    register(FaultReward)
