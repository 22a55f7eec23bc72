"""Fixtures for the MCP server tests: a private state directory, and a root folder holding the sample logs."""
from __future__ import annotations

import shutil

import pytest

pytest.importorskip("mcp")

from tests.helpers.state_dir import state_dir  # noqa: E402,F401 - the autouse fixture


@pytest.fixture()
def root(tmp_path):
    """The server's --root: the bundled sample logs and two validation prompts copied in."""
    from stateset_agents import samples

    folder = tmp_path / "work"
    folder.mkdir()
    shutil.copy(samples.LOGS, folder / "logs.jsonl")
    lines = samples.VALIDATION.read_text().splitlines()[:2]
    (folder / "validation.jsonl").write_text("\n".join(lines) + "\n")
    return folder
