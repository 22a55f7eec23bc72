"""A run id is a plain name wherever it comes from (CLI, gateway, MCP, `stateset_agents.runs`): the state file's
path is built in one place, which refuses anything that could leave the state directory."""
from __future__ import annotations

import pytest

from stateset_agents.core.errors import InputError
from stateset_agents.remote import state


@pytest.mark.parametrize("run_id", ["../x", "a/b", "..", ".hidden", "a..b", "", "x" * 129, "a\x00b", "/etc/passwd"])
def test_a_run_id_that_is_not_a_plain_name_is_refused(state_dir, run_id):
    with pytest.raises(InputError) as caught:
        state.record_path(run_id)
    assert caught.value.field == "run_id"


def test_a_plain_run_id_is_a_file_in_the_state_directory(state_dir):
    path = state.record_path("sa-0123456789abcdef0123")
    assert path.name == "sa-0123456789abcdef0123.json" and path.parent.name == "runs"
    assert state.load_record("sa-0123456789abcdef0123") is None


def test_the_cli_refuses_a_traversing_run_id_in_one_line(state_dir, capsys):
    from stateset_agents.cli import main

    assert main(["finetune", "status", "../../etc/passwd"]) != 0
    err = capsys.readouterr().err
    assert "is not a run id" in err and "Traceback" not in err
