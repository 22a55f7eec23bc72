"""Bad input in the studio: clear messages where the user looks, nothing written or launched."""
from __future__ import annotations

import asyncio


from stateset_agents.remote import state
from stateset_agents.studio.app import StudioApp

from tests.studio.studio_helpers import text, until, write_config


def test_not_a_curated_file_kl_zero_and_a_plan_above_the_cap(workspace):
    asyncio.run(_bad(workspace))


async def _bad(ws):
    write_config(ws, provider="local", algorithm="grpo", reward="customer_support", max_cost_usd=1)
    app = StudioApp(ws)
    async with app.run_test(size=(100, 40)) as pilot:
        # a file that is not a curated dataset (ingest's transcripts): the loader's message, nothing chosen
        app.query_one("#data-path").value = "ingest/transcripts.jsonl"
        app.query_one("#data-path").focus()
        await pilot.press("enter")
        await until(pilot, lambda: text(app, "#data-error"), what="the data error")
        said = text(app, "#data-error")
        assert said.startswith("ingest/transcripts.jsonl: ") and "not a curated dataset: no improve_summary.json" in said
        # a file beside an improve summary that is not its training set
        app.query_one("#data-path").value = "improve/validation.jsonl"
        await pilot.press("enter")
        await until(pilot, lambda: "validation.jsonl" in text(app, "#data-error"), what="the second data error")
        assert "names curated.jsonl as the training set" in text(app, "#data-error")
        assert "dataset" not in app.config and app.query_one("#tabs").active == "data"
        assert app.use_dataset("improve") is True
        await until(pilot, lambda: getattr(app, "defaults_for", None) == "grpo", what="grpo's defaults")
        # KL 0 for an RL objective: refused under the field, no plan
        app.query_one("#cfg-training-beta").value = "0"
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert "KL coefficient must be positive for grpo" in text(app, "#err-training-beta")
        assert app.plan is None and app.query_one("#tabs").active == "configure"
        # the objective's own check and the shared config's: `finetune validate`'s messages
        app.query_one("#cfg-training-beta").value = "0.04"
        app.query_one("#cfg-training-lora_r").value = "0"
        app.query_one("#cfg-max_hours").value = "-1"
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert "max_hours: -1 is less than or equal to the minimum of 0" in text(app, "#cfg-errors")
        app.query_one("#cfg-max_hours").value = "1"
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert text(app, "#err-training-lora_r") == "lora_r must be positive, got 0"
        # a remote plan above the cap: the quote and the refusal, nothing written, Launch disabled
        app.query_one("#cfg-training-lora_r").value = ""
        app.query_one("#cfg-provider").value = "runpod"
        await pilot.pause()
        app.query_one("#cfg-algorithm").value = "sft"
        await until(pilot, lambda: app.defaults_for == "sft", what="sft's fields")
        assert not app.query_one("#row-training-beta").display  # SFT has no KL coefficient
        app.query_one("#cfg-max_cost_usd").value = "0.5"
        await pilot.press("ctrl+r")
        await until(pilot, lambda: "refused" in text(app, "#review-error"),
                    what=f"the refusal ({text(app, '#cfg-errors')})")
        assert "worst case is above --max-cost $0.50" in text(app, "#review-error")
        assert "ABOVE the cap" in text(app, "#review-body")
        assert app.plan is None and app.query_one("#review-launch").disabled
        await pilot.press("ctrl+l")
        await pilot.pause()
    assert not (ws / "studio" / "plans").exists() or not any((ws / "studio" / "plans").iterdir())
    assert state.all_records() == []
