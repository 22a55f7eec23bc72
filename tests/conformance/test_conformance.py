"""The contract, checked for every registered component in every runtime this machine has.

The checks are the packaged suite (`stateset_agents.core.conformance`, what `stateset-agents plugins check` runs for a
third party); new components (first-party, third-party, test-only) are picked up from the registry. In-process
answers are computed once per component and every other runtime must give them.
"""
from __future__ import annotations

import pytest

from stateset_agents.core.conformance import check_component
from stateset_agents.core.registry import get_registry
from stateset_agents.core.runtimes import available_runtimes

SPECS = get_registry(refresh=True).all()
# Every runtime this machine has for the component (container: a Docker daemon and a built image holding it).
CASES = [pytest.param(spec, runtime, id=f"{spec.full_name}@{runtime}",
                      marks=[pytest.mark.container] if runtime == "container" else [])
         for spec in SPECS for runtime in available_runtimes(spec)]
REFERENCE: dict = {}


@pytest.mark.parametrize("spec, runtime", CASES)
def test_component_conforms(spec, runtime):
    results = check_component(spec, [runtime], reference=REFERENCE)
    failed = [f"{r.check}: {r.detail}" for r in results if not r.passed]
    assert results
    assert not failed, "\n".join(failed)


def test_every_kind_is_checked():
    """Each kind installed here has checks of its own beyond the metadata (a provider too)."""
    from stateset_agents.core.conformance import checks_for

    for kind in {s.kind for s in SPECS}:
        assert len(checks_for(kind)) > 1, kind
