"""Each example is found through its own entry point once pip installed it, listed by `plugins list`, and passes
the conformance suite (`plugins check`) in every runtime: in process, in a subprocess, and in a container of the
image its kind is built into (marked `container`)."""
from __future__ import annotations

import json

import pytest

from stateset_agents.cli import main
from tests.helpers.images import TRAINER_RECORDS

from .conftest import installed, require_container

#: component, distribution, the capabilities it declares, the image records holding it (None: the default records)
EXAMPLES = [
    ("reward:politeness", "stateset-reward-politeness", (), None),
    ("trainer:rloo", "stateset-trainer-rloo", ("local", "remote"), TRAINER_RECORDS),
    ("provider:localcmd", "stateset-provider-localcmd", ("quote", "remote_deadline"), None),
]
IDS = [e[0] for e in EXAMPLES]


@pytest.mark.parametrize("component, package, capabilities, records", EXAMPLES, ids=IDS)
def test_discovered_through_its_own_entry_point_and_listed(component, package, capabilities, records, capsys):
    spec = installed(component, package)
    assert set(capabilities) <= set(spec.capabilities)
    assert main(["plugins", "list", "--json", "--kind", spec.kind]) == 0
    rows = {r["component"]: r for r in json.loads(capsys.readouterr().out)["components"]}
    assert rows[component]["package"] == package and rows[component]["available"]


def _check(component: str, *runtimes: str, capsys) -> dict:
    argv = ["plugins", "check", component, "--json"] + [a for r in runtimes for a in ("--runtime", r)]
    code = main(argv)
    report = json.loads(capsys.readouterr().out)
    failed = [f"{r['runtime']} {r['check']}: {r['detail']}" for r in report["results"] if not r["passed"]]
    assert code == 0 and not failed, "\n".join(failed)
    assert {r["runtime"] for r in report["results"]} == set(runtimes)
    return report


@pytest.mark.parametrize("component, package, capabilities, records", EXAMPLES, ids=IDS)
def test_plugins_check_passes_in_process_and_in_a_subprocess(component, package, capabilities, records, capsys):
    installed(component, package)
    report = _check(component, "inprocess", "subprocess", capsys=capsys)
    assert {r["check"] for r in report["results"]} - {"metadata"}  # the kind's own checks ran, not metadata alone


@pytest.mark.container
@pytest.mark.parametrize("component, package, capabilities, records", EXAMPLES, ids=IDS)
def test_plugins_check_passes_in_a_container(component, package, capabilities, records, monkeypatch, capsys):
    installed(component, package)
    if records is not None:
        monkeypatch.setenv("STATESET_AGENTS_IMAGES", str(records))
    require_container(component, records)
    _check(component, "container", capsys=capsys)
