"""The real public data under ../shared/data, as the tests need it.

Tests that use it fail (never skip) when it is missing: they are the evidence the rewards work on real logs.
"""
from __future__ import annotations

import json
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TAU = SHARED / "tau-airline"
GSM8K = SHARED / "gsm8k"


def _require(path: Path) -> Path:
    assert path.exists(), f"real test data missing: {path} (the tests read ../shared/data from the project root)"
    return path


def tau_trajectories() -> list[dict]:
    return json.loads(_require(TAU / "trajectories.dev.json").read_text())


def tau_tools() -> list[dict]:
    return json.loads(_require(TAU / "tools.json").read_text())


def tau_policy_text() -> str:
    return _require(TAU / "policy.md").read_text()


def tau_log_records(with_expected_calls: bool = True) -> list[dict]:
    """The trajectories written out as OpenAI message logs (`{"id", "messages", "tools", "metadata"}`), with
    `info.task.actions` as `expected_tool_calls` when asked, and never the success label."""
    tools = tau_tools()
    records = []
    for t in tau_trajectories():
        metadata = {"task_id": t["task_id"], "trial": t["trial"]}
        if with_expected_calls:
            metadata["expected_tool_calls"] = [
                {"name": a["name"], "arguments": a["kwargs"]} for a in t["info"]["task"]["actions"]
            ]
        records.append({
            "id": f"tau-{t['task_id']}-{t['trial']}",
            "messages": t["traj"],
            "tools": tools,
            "metadata": metadata,
        })
    return records


def tau_labels() -> dict[str, float]:
    """conversation id -> success label (1.0 solved, 0.0 failed)."""
    return {f"tau-{t['task_id']}-{t['trial']}": float(t["reward"]) for t in tau_trajectories()}


def gsm8k_solutions() -> list[dict]:
    path = _require(GSM8K / "model_solutions.dev.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
