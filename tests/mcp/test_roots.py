"""Roots.path, the one place a tool's path argument is resolved: for any string, either a path inside a root (after
every `..` and symlink) or an InputError naming the field; never an OSError from a later stat of it. Also:
train_remote_plan refuses a hub revision beside a local model path, naming the field, before any quote."""
from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers.fuzzing import examples
from tests.mcp.schema_fuzz import escapes

PIECES = st.sampled_from(["..", ".", "a", "escape", "deep", "~", "", "é", "\x00", "x" * 300, "/", "//"])


@pytest.fixture()
def roots(tmp_path):
    from stateset_agents.mcp.roots import Roots

    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "deep").mkdir(parents=True)
    outside.mkdir()
    (root / "escape").symlink_to(outside)  # a symlink out of the root
    (root / "a" / "back").symlink_to(root / "a")  # and one that stays inside
    return Roots([root]), root, outside


def inside(path, root) -> bool:
    return path == root or root in path.parents


@examples(200)
@given(parts=st.lists(PIECES, max_size=6), absolute=st.booleans(), text=st.text(max_size=40))
def test_any_string_is_inside_a_root_or_refused_with_its_field(roots, parts, absolute, text):
    from stateset_agents.core.errors import InputError

    finder, root, outside = roots
    for value in ("/".join(parts), ("/" if absolute else "") + "/".join(parts) + text, text,
                  *escapes(str(outside))):
        try:
            found = finder.path(value, "input")
        except InputError as exc:
            assert exc.field == "input"
            continue
        assert inside(found, root) and found == found.resolve(), (value, found)
        os.path.lexists(found)  # a path it returns can be asked about: no "File name too long"
        assert not inside(found, outside.resolve())


def test_escapes_are_refused_and_the_symlink_is_named(roots):
    from stateset_agents.core.errors import InputError

    finder, root, outside = roots
    for value in escapes(str(outside)) + ["escape", "escape/x", "a/back/../../escape/y", str(root / "escape")]:
        with pytest.raises(InputError, match="outside the folders|no home directory") as caught:
            finder.path(value, "output")
        assert caught.value.field == "output"
    with pytest.raises(InputError, match="through a symlink"):
        finder.path("escape/secret", "output")
    assert finder.path("a/back/deep", "x") == root / "a" / "deep"  # a link that stays inside is fine
    for value in ("x" * 256, "a/" * 2100, "a\x00b", ""):
        with pytest.raises(InputError) as caught:
            finder.path(value, "input")
        assert caught.value.field == "input"


def test_train_remote_plan_refuses_a_revision_beside_a_local_model(root):
    """The shared config's revision rule, through the tool (in process: the SDK's own client), before any quote."""
    import anyio
    from mcp.client import Client

    from stateset_agents.mcp.roots import Roots
    from stateset_agents.mcp.server import Options, build

    async def scenario():
        async with Client(build(Options(roots=Roots([root])))) as client:
            base = {"provider": "local", "dataset": "logs.jsonl", "max_cost_usd": 1, "base_model_revision": "main"}
            for model, said in (("/models/local", "a revision applies to a hub id"),
                                (None, "a revision needs base_model")):
                args = {**base, **({"base_model": model} if model else {})}
                result = await client.call_tool("train_remote_plan", args)
                text = result.content[0].text
                assert result.is_error and said in text and "(field 'base_model_revision')" in text, text
            result = await client.call_tool("train_remote_plan", {**base, "base_model_revision": "a..b"})
            assert result.is_error and "not a git ref" in result.content[0].text
        assert not (root / "runs").exists()

    anyio.run(scenario)


def test_resource_uris_out_of_the_roots_are_refused(root, tmp_path):
    """resources/read: `..` (plain and percent-encoded), absolute folders, a symlink out, a huge or odd URI: a
    JSON-RPC error saying why, never a file from outside; the session goes on."""
    import anyio
    from mcp.client import Client
    from mcp.shared.exceptions import MCPError

    from stateset_agents.mcp.roots import Roots
    from stateset_agents.mcp.server import Options, build

    outside = tmp_path / "outside"
    (outside / "run").mkdir(parents=True)
    (outside / "run" / "manifest.json").write_text('{"secret": true}')
    (root / "escape").symlink_to(outside)
    (root / "runs" / "mine").mkdir(parents=True)
    (root / "runs" / "mine" / "manifest.json").write_text('{"run_id": "mine"}')
    uris = ["stateset://runs/../outside/run/manifest.json", "stateset://runs/..%2Foutside%2Frun/manifest.json",
            f"stateset://runs/{outside}/run/manifest.json", "stateset://runs/escape%2Frun/manifest.json",
            "stateset://runs/runs%2Fmine/../../../outside/run/manifest.json", "stateset://runs/mine/config.json",
            "stateset://runs/" + "a" * 5000 + "/manifest.json", "stateset://runs/%00/manifest.json",
            "stateset://other/x/manifest.json"]

    async def scenario():
        async with Client(build(Options(roots=Roots([root])))) as client:
            for uri in uris:
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(uri)
                assert "secret" not in str(caught.value) and len(str(caught.value)) < 600, uri
            found = await client.read_resource("stateset://runs/runs%2Fmine/manifest.json")
            assert '"mine"' in found.contents[0].text

    anyio.run(scenario)
