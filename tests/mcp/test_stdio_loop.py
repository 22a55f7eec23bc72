"""The improve loop driven over MCP as Claude Code drives it: the official client over stdio against the real server
process (`python -m stateset_agents mcp --root ...`), every tool called on the bundled sample logs with the tiny
random model, each structured result checked against the tool's declared output schema; `train` sends a progress
notification per committed update, and a cancelled `train` stops cooperatively at a checkpoint."""
from __future__ import annotations

import json
import time

import anyio
import pytest

from tests.mcp.mcp_helpers import Checked, stdio_session

pytest.importorskip("torch")

TRAIN = {"algorithm": "sft", "reward": "tool_calling", "eval_prompts": "validation.jsonl", "save_every": 1,
         "max_new_tokens": 4, "config": {"batch_size": 2, "max_prompt_tokens": 256}}
IMAGE = "ghcr.io/stateset/trainer@sha256:" + "ab" * 32


def test_every_tool_over_stdio(root, tiny_model_dir):
    async def scenario():
        async with stdio_session(root, tiny_model_dir) as session:
            tools = (await session.list_tools()).tools
            names = {t.name for t in tools}
            assert {"ingest", "improve_run", "improve_status", "improve_audit", "improve_calibrate", "train",
                    "evaluate", "nominate", "gate", "lineage", "report", "plugins_list", "costs", "runs_list",
                    "run_status", "run_logs", "run_stop", "run_checkpoints", "train_remote_plan"} <= names
            assert "train_remote_launch" not in names  # no --allow-spend: nothing can rent
            for tool in tools:  # every tool declares both schemas, objects at the root
                assert tool.input_schema["type"] == "object" and tool.output_schema["type"] == "object"
            s = Checked(session, tools)

            ingested = await s.ok("ingest", {"format": "openai", "input": "logs.jsonl", "output": "ingested"})
            assert ingested["written"] == 96 and (root / "ingested" / "transcripts.jsonl").is_file()
            improved = await s.ok("improve_run", {"transcripts": "ingested", "reward": "tool_calling",
                                                  "output": "improved"})
            assert improved["counts"]["curated"] > 0 and "stateset-agents train" in improved["train_command"]
            status = await s.ok("improve_status", {"directory": "improved"})
            assert status["counts"] == improved["counts"]
            audit = await s.ok("improve_audit", {"graded": "improved/graded.jsonl", "transcripts": "ingested",
                                                 "label_key": "resolved", "draws": 0})
            assert audit["counts"]["matched"] > 0
            robust = await s.ok("improve_audit", {"robustness": True, "transcripts": "ingested",
                                                  "reward": "tool_calling", "limit": 6})
            assert robust["kinds"] and robust["conversations"] == 6 and robust["decisions_only"] is False
            decisions = await s.ok("improve_audit", {"robustness": True, "transcripts": "ingested", "limit": 6,
                                                     "reward": "tool_calling", "decisions_only": True,
                                                     "kinds": "claimed_action,empty_reply"})
            assert decisions["decisions_only"] is True and decisions["kinds"]["empty_reply"]["applied"] == 0
            calibrated = await s.ok("improve_calibrate", {"graded": "improved/graded.jsonl", "transcripts": "ingested",
                                                          "label_key": "resolved", "output": "reward.yaml",
                                                          "draws": 0, "folds": 2})
            assert (root / "reward.yaml").is_file() and calibrated["measured"]["calibrated"]

            seen = []

            async def on_progress(progress, total, message):
                seen.append((progress, total, message))

            run = await s.ok("train", {**TRAIN, "dataset": "improved/curated.jsonl", "output": "runs/first",
                                       "base_model": str(tiny_model_dir), "steps": 2}, progress_callback=on_progress)
            assert run["committed_updates"] == 2 and [p for p, _, _ in seen] == [1.0, 2.0]
            assert all(total == 2 for _, total, _ in seen) and "committed update" in seen[0][2]
            assert json.loads((root / "runs/first/manifest.json").read_text())["committed_updates"] == 2

            nominated = await s.ok("nominate", {"run": "runs/first", "checkpoint": 1})
            assert nominated["step"] == 1
            evaluated = await s.ok("evaluate", {"run": "runs/first", "prompts": "validation.jsonl",
                                                "reward": "tool_calling", "output": "eval", "max_new_tokens": 4})
            assert evaluated["totals"]["cases"] == 2 and (root / "eval" / "eval_results.json").is_file()
            gated = await s.ok("gate", {"runs": ["runs/first"], "prompts": "validation.jsonl", "reward": "tool_calling",
                                        "output": "gate", "min_seeds": 2})
            assert gated["promoted"] is False and gated["failed_conditions"]  # one seed is descriptive only
            chains = (await s.ok("lineage", {"targets": ["runs/first"]}))["chains"]
            assert chains[0]["ok"] and chains[0]["rows"]
            assert (await s.ok("report", {"run": "runs/first"}))["path"].endswith("report.html")
            listed = await s.ok("plugins_list", {"kind": "reward"})
            assert {"reward:tool_calling", "reward:gsm8k"} <= {c["component"] for c in listed["components"]}
            assert (await s.ok("costs", {}))["ledger"] == []
            assert (await s.ok("runs_list", {}))["runs"] == []
            plan = await s.ok("train_remote_plan", {"provider": "modal", "dataset": "improved/curated.jsonl",
                                                    "gpu": "A10G", "max_cost_usd": 5, "image": IMAGE})
            assert plan["worst_case_usd"] <= 5 and plan["launch_command"].startswith("stateset-agents finetune launch")
            for tool in ("run_status", "run_logs", "run_stop", "run_checkpoints"):  # run control: no such run here
                assert "no-such-run" in await s.error(tool, {"run_id": "no-such-run"})

            # resources: the run's and the improve folder's files, as stateset:// URIs
            uris = {str(r.uri) for r in (await session.list_resources()).resources}
            assert {"stateset://runs/runs/first/manifest.json", "stateset://runs/runs/first/eval_results.json",
                    "stateset://runs/runs/first/metrics.jsonl", "stateset://improve/improved/improve_summary.json",
                    "stateset://improve/improved/next_steps.md"} <= uris
            manifest = (await session.read_resource("stateset://runs/runs/first/manifest.json")).contents[0]
            assert json.loads(manifest.text)["run_id"] == run["run_id"] and manifest.mime_type == "application/json"
            steps = (await session.read_resource("stateset://improve/improved/next_steps.md")).contents[0].text
            assert "stateset-agents train" in steps
            prompts = (await session.list_prompts()).prompts
            assert [p.name for p in prompts] == ["improve_my_agent"]
            text = (await session.get_prompt("improve_my_agent", {"logs": "logs.jsonl"})).messages[0].content.text
            assert all(tool in text for tool in ("ingest", "improve_run", "improve_audit", "train", "evaluate"))

    anyio.run(scenario)


def test_a_cancelled_train_stops_at_a_checkpoint(root, tiny_model_dir):
    from stateset_agents.plugin_api.checkpoints import checkpoint_table, run_state

    rows = [json.dumps({"prompt": [{"role": "user", "content": f"what is {i} + 1"}],
                        "completion": [{"role": "assistant", "content": f"it is {i + 1}"}]}) for i in range(8)]
    (root / "curated.jsonl").write_text("\n".join(rows) + "\n")

    async def scenario():
        async with stdio_session(root, tiny_model_dir) as session:
            first, ended = anyio.Event(), []

            async def on_progress(progress, total, message):
                first.set()

            async def train():
                ended.append(await session.call_tool("train", {"algorithm": "sft", "dataset": "curated.jsonl", "output": "runs/long", "reward": "gsm8k",
                                                  "base_model": str(tiny_model_dir), "steps": 200, "save_every": 50,
                                                  "config": {"batch_size": 2}}, progress_callback=on_progress))
                first.set()  # ended before its first update: the assertion below says why

            async with anyio.create_task_group() as tg:
                tg.start_soon(train)
                with anyio.fail_after(90):
                    await first.wait()
                assert not ended, ended[0].content[0].text
                tg.cancel_scope.cancel()  # the client cancels the call: notifications/cancelled
            run = root / "runs" / "long"
            deadline = time.monotonic() + 60
            while run_state(run) != "stopped" and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            assert run_state(run) == "stopped"
            table = checkpoint_table(run)
            assert table and table[-1]["complete"] and table[-1]["step"] < 200  # saved where it stopped
            # the server is still serving after the cancellation
            assert (await session.call_tool("improve_status", {"directory": "nowhere"})).is_error

    anyio.run(scenario)
