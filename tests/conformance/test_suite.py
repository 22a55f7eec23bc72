"""The conformance suite itself: it finds each kind of broken promise, in process and across the wire, and
`plugins check` prints what fails."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from stateset_agents.cli import main
from stateset_agents.core.conformance import check_component
from stateset_agents.core.errors import InputError
from stateset_agents.core.registry import ComponentSpec, get_registry

from . import broken_plugins

SERVE_AS = str(Path(__file__).with_name("serve_as.py"))


def spec_of(cls) -> ComponentSpec:
    return ComponentSpec(kind=cls.kind, name=cls.name, version=cls.version, target=cls, plugin="broken_plugins",
                         package="(test)")


def served_with_broken(name: str) -> dict:
    return {"subprocess": {"argv": [sys.executable, SERVE_AS, "--plugins", "broken_plugins", name]}}


def failures(results) -> dict[tuple[str, str], str]:
    return {(r.runtime, r.check): r.detail for r in results if not r.passed}


def test_a_reason_of_two_lines_fails_the_row_shape():
    found = failures(check_component(spec_of(broken_plugins.TwoLineReason), ["inprocess"]))
    assert "reason must be one line" in found[("inprocess", "reward.rows")]


def test_grades_that_change_out_of_process_fail_the_comparison():
    spec = spec_of(broken_plugins.PerProcess)
    found = failures(check_component(spec, ["inprocess", "subprocess"],
                                     options=served_with_broken(spec.full_name)))
    assert ("inprocess", "reward.rows") not in found
    assert "answers differ from in-process" in found[("subprocess", "reward.rows")]
    assert "0.25" in found[("subprocess", "reward.rows")]


def test_an_ingestor_that_drops_a_bad_line_fails():
    found = failures(check_component(spec_of(broken_plugins.SilentIngestor), ["inprocess"]))
    assert "must give one Reject" in found[("inprocess", "ingestor.rejects")]


@pytest.mark.parametrize("runtime", ["inprocess", "subprocess"])
def test_a_provider_that_crashes_instead_of_refusing_fails_in_every_runtime(runtime):
    """A KeyError is a crash, not a refusal, in process and out (where it arrives as INTERNAL, not
    INVALID_ARGUMENT)."""
    spec = spec_of(broken_plugins.CrashingProvider)
    found = failures(check_component(spec, [runtime], options=served_with_broken(spec.full_name)))
    assert "quote raised" in found[(runtime, "provider.quote")] and "KeyError" in found[(runtime, "provider.quote")]
    assert "status raised" in found[(runtime, "provider.unknown_run")]
    assert "needs a run_id" in found[(runtime, "provider.list_jobs")]


def test_an_unavailable_component_passes_only_by_saying_how_to_install_it():
    spec = ComponentSpec(kind="reward", name="x", version="1", target="no_such_module_xyz:X", plugin="p",
                         package="p", requires=("no_such_module_xyz",), install="pip install xyz")
    [result] = check_component(spec, ["subprocess"])
    assert result.passed and result.check == "unavailable" and "pip install xyz" in result.detail


def test_an_unknown_runtime_is_refused():
    with pytest.raises(InputError, match="unknown runtime 'elsewhere'"):
        check_component("reward:politeness", ["elsewhere"])


def test_the_suite_leaves_the_users_state_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("STATESET_AGENTS_STATE_DIR", str(tmp_path / "mine"))
    assert all(r.passed for r in check_component("provider:local", ["inprocess"]))
    assert not (tmp_path / "mine").exists()
    import os

    assert os.environ["STATESET_AGENTS_STATE_DIR"] == str(tmp_path / "mine")


def test_plugins_check_prints_each_check_and_exits_zero_when_all_pass(capsys):
    assert main(["plugins", "check", "politeness", "--runtime", "inprocess", "--runtime", "subprocess"]) == 0
    out = capsys.readouterr().out
    assert "pass subprocess reward.rows" in " ".join(out.split())
    assert "reward:politeness: all 11 checks passed (inprocess, subprocess)" in " ".join(out.split())


@pytest.fixture()
def broken_registered(monkeypatch):
    """The broken components in the registry for one test (and in any server it starts)."""
    modules = f"{__import__('os').environ['STATESET_AGENTS_PLUGIN_MODULES']},tests.conformance.broken_plugins"
    monkeypatch.setenv("STATESET_AGENTS_PLUGIN_MODULES", modules)
    get_registry(refresh=True)
    yield
    monkeypatch.undo()
    get_registry(refresh=True)


def test_plugins_check_names_what_fails_and_exits_one(broken_registered, capsys):
    assert main(["plugins", "check", "broken_silent", "--runtime", "inprocess"]) == 1
    captured = capsys.readouterr()
    assert "FAIL inprocess ingestor.rejects a line that is not JSON must give one Reject" in \
        " ".join(captured.out.split())
    assert "ingestor:broken_silent: 1 of 2 checks failed (inprocess)" in " ".join(captured.err.split())
    assert main(["plugins", "check", "broken_crashing", "--runtime", "inprocess", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False
    assert {r["check"] for r in report["results"] if not r["passed"]} == \
        {"provider.quote", "provider.unknown_gpu", "provider.unknown_run", "provider.list_jobs"}


def test_plugins_check_reads_a_config_file_and_refuses_a_bad_one(tmp_path, capsys):
    good = tmp_path / "reward.yaml"
    good.write_text("target: 5\n")
    assert main(["plugins", "check", "test_length", "--runtime", "inprocess", "--config", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("- not a mapping\n")
    assert main(["plugins", "check", "test_length", "--config", str(bad)]) == 2
    assert "bad.yaml: a component's config must be a mapping" in capsys.readouterr().err
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("target: 0\n")  # the schema asks for >= 1: every check fails to build it
    assert main(["plugins", "check", "test_length", "--runtime", "inprocess", "--config", str(invalid)]) == 1
