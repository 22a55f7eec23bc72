"""Test-only rewards for grading on worker processes and Ray (tests/improve/test_workers.py, test_ray.py), loaded
through STATESET_AGENTS_PLUGIN_MODULES so every worker finds them.

`improve_fault` grades as `improve_toy` and, per `config.policy`:
* `pids`: a file each instance appends its process id to (how often, and where, the reward was loaded);
* `die_at` with `marker`: grading conversation `die_at`, the worker kills its own process (SIGKILL: no cleanup, no
  answer), once: it writes `marker` first, and a process that finds the marker grades normally. With `always`, it
  dies every time. Never in process `parent` (the run's own process, which grades chunks too: the test runner);
* `graded_by`: a file each conversation graded appends "PID ID" to (who graded what, how often);
* `hold`: a file that the instance in process `parent` creates when it grades its first conversation; an instance
  in any other process waits for it before grading (so the parent surely grades a chunk, whatever the timing);
* `explode_in_parent`: the instance in process `parent` raises for every conversation (after creating `hold`).
"""
from __future__ import annotations

import os
import signal
import time

from stateset_agents import hookimpl

from tests.improve.improve_toy_reward import ToyReward


class FaultReward(ToyReward):
    name, version = "improve_fault", "1.0.0"

    def __init__(self, config=None):
        super().__init__(config)
        policy = self.config.get("policy") or {}
        self.die_at, self.marker, self.always = policy.get("die_at"), policy.get("marker"), policy.get("always")
        self.in_parent = os.getpid() == policy.get("parent")
        self.graded_by, self.hold, self.explode = policy.get("graded_by"), policy.get("hold"), \
            policy.get("explode_in_parent")
        if policy.get("pids"):
            with open(policy["pids"], "a") as f:
                f.write(f"{os.getpid()}\n")

    def grade_conversation(self, conversation, turns):
        if self.hold and self.in_parent:
            open(self.hold, "a").close()
        elif self.hold:
            deadline = time.monotonic() + 30
            while not os.path.exists(self.hold) and time.monotonic() < deadline:
                time.sleep(0.005)
        if self.explode and self.in_parent:
            raise RuntimeError("asked to explode in the parent")
        if self.graded_by:
            with open(self.graded_by, "a") as f:
                f.write(f"{os.getpid()} {conversation['id']}\n")
        if self.die_at is not None and conversation["id"] == self.die_at and not self.in_parent:
            if self.always or not os.path.exists(self.marker):
                with open(self.marker, "w") as f:
                    f.write(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
        return super().grade_conversation(conversation, turns)


@hookimpl
def register_rewards(register):
    register(FaultReward)
