"""Generated tool arguments (issue 24): for every tool the server lists, calls drawn from its own input schema,
valid and mutated (wrong types, missing and extra fields, huge strings, paths out of the roots by `..`, absolute
paths and a symlink, unicode), sent by the official client over stdio and over streamable HTTP. The server never
crashes and never breaks the protocol; a bad call is a tool error naming the field; a bug (an exception that is not
the pipeline's own error) never surfaces; the session answers a ping after every call. The tools that would start
real work (training, evaluation, a remote quote) only get calls the schema or the roots refuse before work starts."""
from __future__ import annotations

import os
import re
from pathlib import Path

import anyio.from_thread
import jsonschema
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.fuzzing import examples
from tests.mcp.schema_fuzz import arguments
from tests.mcp.mcp_helpers import stdio_session

#: tools that would train, evaluate or ask a provider for a price: fuzzed with refused calls only
WORK_TOOLS = {"train", "evaluate", "gate", "train_remote_plan", "train_remote_launch"}
BUG = re.compile(r"\bfailed: [A-Z]\w*(Error|Exception|Exit)\b")  # the server's words for an exception it did not expect
FIELD = re.compile(r"\(field '([^']*)'\)")


def outside_and_escape(root: Path, tmp: Path) -> Path:
    """A folder outside the root with a file in it, and a symlink `escape` from the root to it."""
    outside = tmp / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "secret.jsonl").write_text('{"messages": [{"role": "user", "content": "secret"}]}\n')
    if not (root / "escape").is_symlink():
        (root / "escape").symlink_to(outside)
    return outside


def check(tool, draw, result) -> None:
    """One call's answer against what the draw was."""
    text = result.content[0].text if result.content else ""
    assert not BUG.search(text), f"{tool.name} {draw.args!r}: {text[:500]}"
    if draw.broken or draw.escaped:
        assert result.is_error, f"{tool.name} accepted {draw.how} arguments {str(draw.args)[:300]}"
    if not result.is_error:
        jsonschema.validate(result.structured_content, tool.output_schema)
        return
    assert result.structured_content is None and len(text) < 4000, text[:500]  # a huge value is never echoed
    named = FIELD.findall(text)
    assert named, f"{tool.name}: an error that names no field: {text[:300]}"
    if draw.broken:  # the schema's refusal names every field it refused, the one the draw broke among them
        assert any(name in text for name in draw.broken), (draw.broken, text[:300])
    if "outside the folders this server may use" in text:
        assert {n.partition("[")[0] for n in named} <= draw.escaped, (draw.escaped, text[:300])


def fuzz(portal, session, tools, outside: Path, per_tool: int, root: Path) -> int:
    """Every tool, `per_tool` generated calls each (times the profile's factor); returns the calls made."""
    calls = 0

    def prop(tool):
        @examples(per_tool)
        @given(st.data())
        def one(data):
            nonlocal calls
            draw = data.draw(arguments(tool, str(outside), allow_valid=tool.name not in WORK_TOOLS), label="call")
            result = portal.call(session.call_tool, tool.name, draw.args)
            calls += 1
            check(tool, draw, result)
            portal.call(session.send_ping)  # the session still answers

        return one

    for tool in tools:
        prop(tool)()
    for folder, _, names in os.walk(root):  # nothing from outside was read into the root (links not followed)
        for name in names:
            path = Path(folder, name)
            assert path.is_symlink() or b'"content": "secret"' not in path.read_bytes(), path
    return calls


def test_generated_arguments_over_stdio(root, tmp_path):
    outside = outside_and_escape(root, tmp_path)
    errlog = (tmp_path / "server.err").open("w+")
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(stdio_session(root, errlog=errlog)) as session:
            tools = portal.call(session.list_tools).tools
            assert len(tools) >= 19
            calls = fuzz(portal, session, tools, outside, 6, root)
            assert calls >= 6 * len(tools)
            assert len(portal.call(session.list_tools).tools) == len(tools)  # the same server, still whole
    errlog.seek(0)
    assert "Traceback" not in errlog.read()  # nothing the server did not expect was logged
    assert sorted(p.name for p in outside.iterdir()) == ["secret.jsonl"]  # nothing written outside the root


#: What the fuzzing found, each once as its own case: (tool, arguments, the field the error must name, words in it).
FOUND = [
    ("improve_status", {"directory": "é" * 200}, "directory", "each name in it at most 255"),  # was OSError 36
    ("nominate", {"run": "a" * 300, "checkpoint": 1}, "run", "each name in it at most 255"),
    ("ingest", {"format": "openai", "input": "~nosuchuser/x", "output": "o"}, "input", "no home directory"),  # RuntimeError
    ("run_status", {"run_id": "é" * 300}, "run_id", "above the limit of 128"),  # was OSError 36 in the state dir
    ("run_status", {"run_id": "../../work/logs"}, "run_id", "does not match"),  # read STATE/runs/../../x.json
    ("improve_audit", {"graded": "sub", "labels": "logs.jsonl"}, "graded", "Is a directory"),  # IsADirectoryError
    ("ingest", {"format": "", "input": "logs.jsonl", "output": "o"}, "format", "unknown ingestor"),  # no field
    ("improve_calibrate", {"graded": "logs.jsonl", "output": "o.yaml"}, "label_key", "give labels either"),
    ("ingest", {"format": "openai", "input": "x" * 5000, "output": "o"}, "input", "5000 characters long"),  # echoed
]


def test_what_fuzzing_found(root):
    """Regressions, in process (the SDK's own client against the same server object)."""
    import anyio
    from mcp.client import Client

    from stateset_agents.mcp.roots import Roots
    from stateset_agents.mcp.server import Options, build

    (root / "sub").mkdir()

    async def scenario():
        async with Client(build(Options(roots=Roots([root])))) as client:
            for name, args, field, words in FOUND:
                result = await client.call_tool(name, args)
                text = result.content[0].text
                assert result.is_error and not BUG.search(text), (name, text[:300])
                assert f"(field '{field}')" in text and words in text and len(text) < 1000, (name, text[:300])

    anyio.run(scenario)
