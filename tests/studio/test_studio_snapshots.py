"""Snapshots of each pane (and the help screen) at 80x24 and 160x48: Textual's own SVG export compared with the
stored one in tests/studio/snapshots/. STUDIO_SNAPSHOT_UPDATE=1 rewrites them (look at the SVGs before committing).

Only what changes from run to run is normalised: the export's content-hash class prefix and the quote's timestamp.
The Watch pane reads a run directory written here (metrics.jsonl, eval_results.json), as it reads any run's."""
from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest

from stateset_agents.studio.app import HelpScreen, StudioApp

from tests.studio.studio_helpers import until, write_config

SNAPSHOTS = Path(__file__).parent / "snapshots"
SIZES = ((80, 24), (160, 48))


def normalise(svg: str) -> str:
    svg = re.sub(r"terminal-\d+", "terminal", svg)
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?\+00:00", "TIME", svg)


async def settle(pilot) -> None:
    """Let focus moves and the footer's bindings catch up before the export."""
    for _ in range(3):
        await pilot.pause(0.05)


def check(name: str, svg: str) -> None:
    path = SNAPSHOTS / f"{name}.svg"
    svg = normalise(svg)
    if os.environ.get("STUDIO_SNAPSHOT_UPDATE"):
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(svg)
        return
    assert path.is_file(), f"no stored snapshot {path}: run with STUDIO_SNAPSHOT_UPDATE=1 and look at it"
    assert svg == path.read_text(), f"{name} differs from {path} (STUDIO_SNAPSHOT_UPDATE=1 rewrites it)"


def write_run(run: Path) -> Path:
    """A run directory as a trainer leaves it: a metrics row per committed update and the held-out results."""
    run.mkdir(parents=True)
    rows = [{"step": s, "reward_mean": 0.3 + 0.02 * s + 0.05 * (s % 3), "reward_std": 0.2 - 0.005 * s,
             "loss": 1.0 / s, "kl": 0.001 * s, "clip_fraction": 0.01 * (s % 4), "tokens_per_s": 300 + s}
            for s in range(1, 21)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cases = [{"id": f"case-{i}", "base": {"score": b}, "candidate": {"score": c}, "difference": c - b}
             for i, (b, c) in enumerate([(0.5, 0.75), (0.75, 0.5), (0.25, 0.25), (1.0, 0.0), (0.5, 1.0)])]
    (run / "eval_results.json").write_text(json.dumps({
        "split": "validation", "cases": cases,
        "totals": {"cases": 5, "base_mean": 0.6, "candidate_mean": 0.5, "improved": 2, "regressed": 2,
                   "unchanged": 1},
        "statistics": {"p_value": 0.8125}}))
    return run


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_each_pane_and_the_help_screen(workspace, size):
    write_config(workspace, provider="runpod", algorithm="sft", reward="customer_support", max_cost_usd=0.5)
    asyncio.run(_shots(workspace, size))


async def _shots(ws: Path, size):
    tag = f"{size[0]}x{size[1]}"
    app = StudioApp(ws)
    app.animation_level = "none"  # the tab underline would be caught mid-slide
    async with app.run_test(size=size) as pilot:
        assert app.use_dataset("improve", switch=False)
        await until(pilot, lambda: getattr(app, "defaults_for", None) == "sft", what="sft's fields")
        await settle(pilot)
        check(f"data-{tag}", app.export_screenshot())
        app.action_pane("configure")
        await settle(pilot)
        check(f"configure-{tag}", app.export_screenshot())
        await pilot.press("ctrl+r")
        await until(pilot, lambda: "refused" in str(app.query_one("#review-error").render()), what="refusal")
        await settle(pilot)
        check(f"review-{tag}", app.export_screenshot())
        app.attach(str(write_run(ws / "runs" / "example")))
        await until(pilot, lambda: app.query_one("#watch-results").row_count == 5, what="the run read")
        await settle(pilot)
        check(f"watch-{tag}", app.export_screenshot())
        app.push_screen(HelpScreen())
        await settle(pilot)
        check(f"help-{tag}", app.export_screenshot())
