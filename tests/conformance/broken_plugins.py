"""Components that break one promise each, for the tests of the conformance suite itself. Not registered for the
rest of the suite: the in-process side builds their specs directly, and `serve_as.py --plugins broken_plugins`
loads them in a server of their own."""
from __future__ import annotations

import os

from stateset_agents import Ingestor, Provider, Reward, TurnGrade, hookimpl


class TwoLineReason(Reward):
    name, version = "broken_two_line_reason", "1.0.0"

    def grade_turn(self, conversation, turn_index):
        return TurnGrade(score=0.5, reason="first line")

    def grade(self, items):  # the kernel keeps one line of a reason; this override sends the second line through
        rows = super().grade(items)
        return [{**r, "reason": "first line\nsecond line"} for r in rows]


class PerProcess(Reward):
    """Grades by the process it runs in: the same input gives other grades out of process."""

    name, version = "broken_per_process", "1.0.0"

    def grade_turn(self, conversation, turn_index):
        return TurnGrade(score=0.25 if os.environ.get("STATESET_PLUGIN_TOKEN") else 0.75, reason="by process")


class SilentIngestor(Ingestor):
    """Drops a bad line instead of rejecting it."""

    name, version = "broken_silent", "1.0.0"

    def ingest(self, source):
        return iter(())


class CrashingProvider(Provider):
    """Answers quotes, but crashes (KeyError) when asked about a run it does not know."""

    name, version = "broken_crashing", "1.0.0"

    def quote(self, plan):
        raise KeyError("gpu")

    def status(self, run_id):
        return {"jobs": {}}[run_id]

    def artifacts(self, request):
        return {"run_id": request["run_id"], "state": "missing", "files": []}

    def terminate(self, run_id):
        return {"run_id": run_id, "terminated": False}

    def list_jobs(self):
        return [{"state": "running"}]


@hookimpl
def register_rewards(register):
    register(TwoLineReason)
    register(PerProcess)


@hookimpl
def register_ingestors(register):
    register(SilentIngestor)


@hookimpl
def register_providers(register):
    register(CrashingProvider)
