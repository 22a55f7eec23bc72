"""The studio driven headless by Textual's pilot, on real local runs of the tiny model (provider:local, the same
session and run-control calls as the CLI): choose data, configure, review (the plan `finetune prepare` writes for
the same config), launch, relaunch (attaches), watch the curve grow, stop, resume exactly, read the results."""
from __future__ import annotations

import asyncio
import json

import pytest

from stateset_agents.cli import main
from stateset_agents.remote import state
from stateset_agents.remote.plan import load_verified
from stateset_agents.studio.app import StudioApp
from stateset_agents.studio.panes import WatchPane
from tests.studio.studio_helpers import text, until

pytest.importorskip("torch")
# long enough that the stop always lands before the run's last step, even on a loaded machine (at 12 a run
# starved of the poller finished first and never stopped)
STEPS = 40


def test_choose_configure_review_launch_watch_stop_resume(workspace, tiny_config, tmp_path):
    asyncio.run(_flow(workspace, tmp_path))


async def _flow(ws, tmp_path):
    app = StudioApp(ws, poll_s=0.25)
    async with app.run_test(size=(100, 40)) as pilot:
        # data: the improve folder is listed; pick it with the keyboard
        app.query_one("#data-list").focus()
        await pilot.press("down", "enter")
        await until(pilot, lambda: app.config.get("dataset", "").endswith("improve/curated.jsonl"), what="data")
        assert "187 rows" in text(app, "#data-summary") and "per-check means" in text(app, "#data-summary")
        assert app.config["eval_prompts"].endswith("validation.jsonl")
        assert app.query_one("#tabs").active == "configure"
        # configure: the objective's fields come from its config class
        await until(pilot, lambda: getattr(app, "defaults_for", None) == "grpo", what="grpo's defaults")
        assert app.query_one("#cfg-training-beta").placeholder == "default 0.04"
        for key, value in (("steps", STEPS), ("save_every", 2), ("seed", 3), ("beta", 0.05)):
            app.query_one(f"#cfg-training-{key}").value = str(value)
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.plan is not None, what="the plan")
        plan = app.plan
        body = text(app, "#review-body")
        assert plan["run_id"] in body and plan["checksum"] in body and "within the cap" in body
        # the same config through `finetune prepare`: the same run id, config and job; the shown checksum is
        # the one plan.json is verified against (`finetune launch` takes this workspace as it is)
        config_file = ws / "studio" / "config.json"
        assert main(["finetune", "validate", "--config", str(config_file)]) == 0
        assert main(["finetune", "prepare", "--config", str(config_file), "--workspace", str(tmp_path / "cli")]) == 0
        cli = load_verified(tmp_path / "cli")
        assert (cli["run_id"], cli["config_sha256"], cli["job_identity"]) == \
            (plan["run_id"], plan["config_sha256"], plan["job_identity"])
        assert load_verified(plan["_workspace"])["checksum"] == plan["checksum"]
        run_id = plan["run_id"]

        await pilot.press("ctrl+l")
        await until(pilot, lambda: (state.load_record(run_id) or {}).get("phase") == "running", what="launch")
        # relaunching the same plan: the same run id and checksum, attached to the job (never a second one)
        await pilot.press("ctrl+r")
        await until(pilot, lambda: app.plan is not None and "attached" not in text(app, "#review-error"),
                    what="the second review")
        assert (app.plan["run_id"], app.plan["checksum"]) == (run_id, plan["checksum"])
        await pilot.press("ctrl+l")
        await until(pilot, lambda: "attached to the existing job" in text(app, "#review-error"), what="attach")
        assert len(list((state.state_dir() / "local" / "jobs").iterdir())) == 1

        # watch: the plotted points grow while the run writes metrics
        watch = app.query_one(WatchPane)
        counts = []

        def grew():
            n = len(watch.points("reward_mean"))
            if not counts or n != counts[-1]:
                counts.append(n)
            return len(counts) >= 3 and counts[-1] > 0 and watch.snapshot.checkpoints
        await until(pilot, grew, what="growing curve")
        assert counts == sorted(counts) and counts[-1] > counts[0]
        assert f"({counts[-1]} points)" in text(app, "#watch-curve-label") or len(watch.points()) >= counts[-1]
        assert app.query_one("#watch-log").lines  # the job's log tail

        # stop: cooperative; the run ends "stopped" with a checkpoint, collected
        await pilot.press("ctrl+t")
        await until(pilot, lambda: state.load_record(run_id)["phase"] == "stopped", what="stopped")
        await until(pilot, lambda: not app.query_one("#watch-resume").disabled, what="resume enabled")
        whole = [c for c in watch.snapshot.checkpoints if c["complete"]]
        k = whole[-1]["step"]
        assert 1 <= k < STEPS

        # resume: an exact continuation's plan, reviewed, then launched; it runs to the budget
        await pilot.press("ctrl+g")
        await until(pilot, lambda: app.plan is not None and app.plan.get("resume"), what="the resume plan")
        child = app.plan
        assert child["resume"] == {"mode": "exact", "parent_run_id": run_id, "checkpoint_step": k,
                                   "checkpoint_sha256": whole[-1]["sha256"]}
        assert f"continues {run_id} from checkpoint {k}" in text(app, "#review-body")
        await pilot.press("ctrl+l")
        await until(pilot, lambda: (state.load_record(child["run_id"]) or {}).get("phase") == "collected",
                    timeout=300, what="the child collected")
        table = app.query_one("#watch-results")
        await until(pilot, lambda: table.row_count > 0, what="the results table")
        out = ws / "studio" / "runs" / child["run_id"]
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["committed_updates"] == STEPS
        results = json.loads((out / "eval_results.json").read_text())
        assert table.row_count == len(results["cases"])
        shown = [float(table.get_row_at(i)[3]) for i in range(table.row_count)]
        assert shown == sorted(shown)  # worst regressions first
        totals = results["totals"]
        assert f"improved {totals['improved']}, regressed {totals['regressed']}" in text(app, "#watch-results-summary")
        assert len(watch.points("reward_mean")) == STEPS
