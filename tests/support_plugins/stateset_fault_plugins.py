"""Test-only plugins that fail on request, mid-batch, for tests/faults. They import only `stateset_agents`, so the
same file serves them inside the `plugins` image too (tests/faults/conftest.py copies it into a derived image).

reward:test_fault grades every turn 1.0 until the conversation whose id is its policy's `at`; that batch then
`fault`s:

* raise: grade_turn raises; die: the process SIGKILLs itself; hang: sleeps an hour;
* wrong_type: grade_turn returns a dict, not a TurnGrade; nan: the batch's rows score NaN; wrong_count: the batch
  loses a row; unencodable: a row's breakdown holds an object JSON cannot encode;
* malformed (out of process only): the server's reply to that batch is cut in the middle of a row.

trainer:test_fault emits a metrics event per step and `fault`s at step `at` (the request's `config`, as `train
--config` passes it): raise, die, hang, wrong_type (an event that is not an object), untyped (an event without a
type), malformed (out of process: the event's JSON is cut). It completes by writing OUTPUT/manifest.json.
"""
from __future__ import annotations

import os
import signal
import time

from stateset_agents import Reward, Trainer, TurnGrade, hookimpl

HANG_SECONDS = 3600


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no reply: as the OOM killer would
    # still here: we are a container's pid 1, which ignores signals sent from inside; end as SIGKILL would
    os._exit(128 + signal.SIGKILL)


def _cut_replies(module: str, name: str) -> None:
    """Make this plugin server send a broken reply: wrap the server's encoder so its output is cut in half. A plugin
    is code; nothing stops a buggy one from sending any bytes."""
    import sys

    server = sys.modules.get("stateset_agents.core.runtimes.server")
    if server is None:
        raise RuntimeError("malformed replies need a plugin server (an out-of-process runtime)")
    target = getattr(server, module) if module else server
    original = getattr(target, name)
    if getattr(original, "cut", False):
        return

    def cut(*args, **kwargs):
        out = original(*args, **kwargs)
        if isinstance(out, bytes):
            return out[: max(1, len(out) // 2)]
        out.json = out.json[: max(1, len(out.json) // 2)]  # an Event
        return out

    cut.cut = True
    setattr(target, name, cut)


class FaultReward(Reward):
    name, version = "test_fault", "1.0.0"

    def _policy(self) -> dict:
        return dict(self.config.get("policy") or {})

    def grade(self, items):
        items = list(items)
        policy = self._policy()
        fault, at = policy.get("fault"), policy.get("at")
        hit = any(str(item.conversation.get("id")) == at for item in items)
        if hit and fault == "malformed":
            _cut_replies("", "dumps_line")
        rows = super().grade(items)
        if not hit:
            return rows
        if fault == "nan":
            for row in rows:
                row["score"] = float("nan")
        elif fault == "wrong_count":
            rows = rows[:-1]
        elif fault == "unencodable":
            rows[-1]["breakdown"] = {"object": object()}
        return rows

    def grade_turn(self, conversation, turn_index):
        policy = self._policy()
        if str(conversation.get("id")) == policy.get("at"):
            fault = policy.get("fault")
            if fault == "raise":
                raise RuntimeError(f"asked to fail at {policy['at']}")
            if fault == "die":
                _die()
            if fault == "hang":
                time.sleep(HANG_SECONDS)
            if fault == "wrong_type":
                return {"score": 1.0}
        return TurnGrade(score=1.0, reason="fine")


class FaultTrainer(Trainer):
    name, version = "test_fault", "1.0.0"

    def run(self, request):
        if "output" not in request:
            yield {"type": "failed", "reason": "request has no 'output'"}
            return
        config = dict(request.get("config") or {})
        fault, at, steps = config.get("fault"), int(config.get("at", 2)), int(request.get("steps") or 4)
        output = request.get("output")
        for step in range(1, steps + 1):
            if self.cancelled:
                yield {"type": "failed", "reason": "cancelled", "step": step - 1}
                return
            time.sleep(float(config.get("delay", 0.1)))  # a step takes time: later steps are not queued at once
            if step == at:
                if fault == "raise":
                    raise RuntimeError(f"asked to fail at step {step}")
                if fault == "die":
                    _die()
                if fault == "hang":
                    time.sleep(HANG_SECONDS)
                if fault == "wrong_type":
                    yield ["not", "an", "event"]
                    continue
                if fault == "untyped":
                    yield {"step": step}
                    continue
                if fault == "malformed":
                    _cut_replies("convert", "event_to_proto")
            yield {"type": "metrics", "step": step, "metrics": {"loss": 1.0 / step}}
        if output:
            os.makedirs(output, exist_ok=True)
            with open(os.path.join(output, "manifest.json"), "w") as f:
                f.write('{"completed": true}\n')
        yield {"type": "completed", "step": steps, "run_id": "fault-run"}


@hookimpl
def register_rewards(register):
    register(FaultReward)


@hookimpl
def register_trainers(register):
    register(FaultTrainer)
