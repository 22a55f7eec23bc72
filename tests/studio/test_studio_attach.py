"""The studio on runs started from the CLI: attach by run directory (a `train-remote --detach` run is followed by
its run id, as `train-remote --attach` follows it), and `--help` stays fast (Textual imported only by the command)."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from stateset_agents.cli import main
from stateset_agents.remote import state
from stateset_agents.studio.app import StudioApp
from stateset_agents.studio.panes import WatchPane

from tests.studio.studio_helpers import text, until

STEPS = 4


def test_attach_by_run_directory_to_a_run_the_cli_started(workspace, tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("torch")
    out = tmp_path / "runs" / "from-cli"
    config = tmp_path / "run.json"
    config.write_text(json.dumps({"training": {"steps": STEPS, "save_every": 2, "batch_size": 2, "max_new_tokens": 4,
                                               "num_generations": 2, "max_prompt_tokens": 96},
                                  "eval": {"max_new_tokens": 4}}))
    assert main(["train-remote", "--provider", "local", "--dataset", str(workspace / "improve" / "curated.jsonl"),
                 "--eval-prompts", str(workspace / "improve" / "validation.jsonl"), "--base-model",
                 str(tiny_model_dir), "--algorithm", "grpo", "--reward", "customer_support", "--max-cost", "1",
                 "--max-hours", "0.5", "--config", str(config), "--output", str(out), "--detach"]) == 0
    run_id = state.all_records()[0]["run_id"]
    # quitting while the run is live returns at once and leaves it running (the next attach picks it up)
    started = time.monotonic()
    asyncio.run(_open_and_quit(workspace, out))
    assert time.monotonic() - started < 15
    assert state.load_record(run_id)["phase"] == "running"
    asyncio.run(_attach(workspace, out, run_id))
    record = state.load_record(run_id)
    assert record["phase"] == "collected"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == STEPS


async def _open_and_quit(ws, out):
    app = StudioApp(ws, attach=str(out), poll_s=0.25)
    async with app.run_test(size=(100, 40)) as pilot:
        await until(pilot, lambda: app.feed is not None, what="the attach")
        await pilot.press("ctrl+q")


async def _attach(ws, out, run_id):
    app = StudioApp(ws, attach=str(out), poll_s=0.25)
    async with app.run_test(size=(100, 40)) as pilot:
        await until(pilot, lambda: app.feed is not None, what="the attach")
        assert app.feed is not None and app.feed.run_id == run_id  # the run writing to that directory
        assert app.query_one("#tabs").active == "watch"
        await until(pilot, lambda: (state.load_record(run_id) or {}).get("phase") == "collected", timeout=120,
                    what="collected")
        watch = app.query_one(WatchPane)
        await until(pilot, lambda: len(watch.points("loss")) == STEPS and watch.snapshot.results, what="the run")
        assert text(app, "#watch-title").startswith(f"{run_id}: collected · {STEPS} of {STEPS} committed updates")
        assert [c["step"] for c in watch.snapshot.checkpoints] == [2, 4]
        assert app.query_one("#watch-stop").disabled  # over: nothing to stop


def test_help_is_fast_and_imports_no_textual():
    code = ("import sys; from stateset_agents.cli import main; "
            "rc = main(['studio', '--help']); assert 'textual' not in sys.modules, 'textual imported'; "
            "sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "WORKSPACE" in done.stdout and "--attach" in done.stdout


def test_a_workspace_that_is_not_a_folder_is_refused(tmp_path, capsys):
    assert main(["studio", str(tmp_path / "missing")]) == 2
    assert "not a folder" in capsys.readouterr().err
