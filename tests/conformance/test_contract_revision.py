"""A plugin built against the previous contract revision keeps working with today's kernel: its server speaks
contract version 1 and advertises none of the optional features added since, so the client falls back to the
baseline calls, and the whole conformance suite passes across the wire with the in-process answers."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from stateset_agents import GradeItem
from stateset_agents.core.conformance import check_component
from stateset_agents.core.registry import get_registry
from stateset_agents.core.runtimes import load_spec

SERVE_AS = str(Path(__file__).with_name("serve_as.py"))


def old_server(name: str) -> list[str]:
    return [sys.executable, SERVE_AS, "--old-revision", name]


@pytest.mark.parametrize("name", ["reward:politeness", "reward:test_screening", "ingestor:openai",
                                  "provider:local"])
def test_a_previous_revision_plugin_passes_the_suite(name):
    results = check_component(name, ["inprocess", "subprocess"], options={"subprocess": {"argv": old_server(name)}})
    failed = [f"{r.runtime} {r.check}: {r.detail}" for r in results if not r.passed]
    assert not failed, "\n".join(failed)
    assert {r.runtime for r in results} == {"inprocess", "subprocess"}


def test_the_client_uses_no_feature_the_old_server_does_not_advertise():
    spec = get_registry().resolve("reward:test_screening")
    conv = {"id": "skip-1", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    with load_spec(spec, runtime="subprocess", argv=old_server(spec.full_name)) as remote:
        assert remote.features == frozenset() and 1 in remote.contract_versions
        request = remote._request([GradeItem(conv, raw_json=b'{"id":"skip-1"}')], screened=True)
        assert not request.conversations_jsonl and not request.accept_screened  # the baseline request
        [rows] = remote.grade_many([[GradeItem(conv)]], screened=True)
        assert [r["reason"] for r in rows] == ["the id says skip"] and not getattr(rows, "screened", None)
