"""What the server refuses, as tool errors carrying the CLI's message (never a protocol error): a path outside the
roots (through `..` or a symlink), bad arguments (schema errors naming the field), a spend tool without
--allow-spend, a cap below the quote; a failed tool leaves no output; without torch, the torch tools are listed as
unavailable with the install command (the registry's availability, simulated)."""
from __future__ import annotations

import anyio

from tests.mcp.mcp_helpers import Checked, stdio_session

IMAGE = "ghcr.io/stateset/trainer@sha256:" + "ab" * 32


def test_refusals_over_stdio(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    (root / "escape").symlink_to(outside)

    async def scenario():
        async with stdio_session(root) as session:
            s = Checked(session, (await session.list_tools()).tools)
            for given in (str(outside / "secret.jsonl"), "../outside/secret.jsonl", "escape/secret.jsonl"):
                text = await s.error("ingest", {"format": "openai", "input": given, "output": "out"})
                assert "outside the folders this server may use" in text and "(field 'input')" in text
            assert "through a symlink" in text
            assert not (root / "out").exists()
            text = await s.error("ingest", {"format": "openai", "input": "logs.jsonl", "output": "../elsewhere"})
            assert "(field 'output')" in text and not (tmp_path / "elsewhere").exists()

            text = await s.error("ingest", {"format": "openai", "inputs": "logs.jsonl"})
            assert "input: is required" in text and "output: is required" in text
            assert "inputs: is not an argument of this tool" in text
            text = await s.error("nominate", {"run": "runs/x", "checkpoint": "two"})
            assert "checkpoint: 'two' is not of type 'integer'" in text and "(field 'checkpoint')" in text
            text = await s.error("improve_run", {"transcripts": "t", "output": "o", "held_out": 0.9})
            assert "held_out" in text and "(field 'held_out')" in text

            # the CLI's message, with the file and the line
            (root / "bad").mkdir()
            (root / "bad" / "transcripts.jsonl").write_text('{"id": "a", "messages": []}\n{not json\n')
            text = await s.error("improve_run", {"transcripts": "bad", "reward": "tool_calling", "output": "graded"})
            assert "transcripts.jsonl:1:" in text and "(field 'messages')" in text
            assert not (root / "graded").exists() or not any((root / "graded").iterdir())  # nothing half-written

            text = await s.error("train_remote_launch", {"max_cost_usd": 1})
            assert "--allow-spend" in text
            text = await s.error("train_remote_plan", {"provider": "modal", "dataset": "logs.jsonl", "gpu": "A10G",
                                                       "image": IMAGE})
            assert "max_cost_usd: is required" in text
            text = await s.error("train_remote_plan", {"provider": "modal", "dataset": "logs.jsonl", "gpu": "A10G",
                                                       "image": IMAGE, "max_cost_usd": 0.01})
            assert "above" in text and "0.01" in text
            assert not (await s.ok("runs_list", {}))["runs"]

    anyio.run(scenario)


def test_spend_tool_with_allow_spend_still_needs_the_cap(root):
    async def scenario():
        async with stdio_session(root, extra=("--allow-spend",)) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert "max_cost_usd" in tools["train_remote_launch"].input_schema["required"]
            s = Checked(session, tools.values())
            text = await s.error("train_remote_launch", {"provider": "modal", "dataset": "logs.jsonl"})
            assert "max_cost_usd: is required" in text
            text = await s.error("train_remote_launch", {"provider": "modal", "dataset": "logs.jsonl", "gpu": "A10G",
                                                         "image": IMAGE, "max_cost_usd": 0.01})
            assert "above" in text and "0.01" in text  # the CLI's cap refusal, before anything is rented
            assert (await s.ok("costs", {}))["ledger"] == []

    anyio.run(scenario)


def test_without_torch_the_torch_tools_are_unavailable(root, monkeypatch):
    """The registry reports the trainers and the paired evaluator as missing torch; the server lists them as
    unavailable with the install command and refuses to call them (in process, the SDK's own client)."""
    from mcp.client import Client

    from stateset_agents.core.registry import ComponentSpec
    from stateset_agents.mcp.roots import Roots
    from stateset_agents.mcp.server import Options, build

    real = ComponentSpec.missing
    monkeypatch.setattr(ComponentSpec, "missing",
                        property(lambda spec: ["torch"] if "torch" in spec.requires else real.fget(spec)))

    async def scenario():
        async with Client(build(Options(roots=Roots([root])))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            for name in ("train", "evaluate", "gate"):
                assert tools[name].description.startswith("UNAVAILABLE here:")
                assert "pip install 'stateset-agents[train]'" in tools[name].description
            assert not tools["ingest"].description.startswith("UNAVAILABLE")
            result = await client.call_tool("train", {"dataset": "d.jsonl", "output": "run"})
            assert result.is_error and "stateset-agents[train]" in result.content[0].text
            assert not (root / "run").exists()

    anyio.run(scenario)
