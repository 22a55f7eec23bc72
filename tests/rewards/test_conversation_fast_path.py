"""A reward may grade a whole conversation at once (`grade_conversation`) for speed; it must give exactly the grades
that grading each turn on its own gives, on real logs."""
from __future__ import annotations

import pytest

from tests.helpers.realdata import tau_log_records
from stateset_agents import GradeItem
from stateset_agents.core.components import assistant_turns
from stateset_agents.core.runtimes import load_component


@pytest.mark.parametrize("name", ["tool_calling", "customer_support", "nsr", "gsm8k"])
def test_whole_conversation_grading_equals_turn_by_turn(name):
    from stateset_agents.core.registry import get_registry

    cls = get_registry().resolve(name, kind="reward").load_class()
    records = tau_log_records(with_expected_calls=True)[::7]
    with load_component(name, config=cls.example_config()) as reward:
        together = reward.grade([GradeItem(r) for r in records])
        one_by_one = [row for r in records for t in assistant_turns(r)
                      for row in reward.grade([GradeItem(r, turns=[t])])]
    assert together == one_by_one


@pytest.mark.parametrize("name", ["tool_calling", "customer_support", "nsr", "gsm8k"])
def test_grading_leaves_no_reference_cycles(name):
    """A graded conversation must be freed by reference counting: a cycle through it (a bound method kept in an
    object the method's owner holds) leaves its whole parsed tree to the cyclic collector, whose passes cost
    tool_calling's grading a quarter of its time."""
    import gc

    from stateset_agents.core.registry import get_registry

    cls = get_registry().resolve(name, kind="reward").load_class()
    records = tau_log_records(with_expected_calls=True)[::5]
    with load_component(name, config=cls.example_config()) as reward:
        reward.grade([GradeItem(r) for r in records[:3]])  # warm: lazily built tables and caches are not garbage
        gc.collect()
        gc.disable()
        try:
            rows = reward.grade([GradeItem(r) for r in records])
            del rows
            unreachable = gc.collect()
        finally:
            gc.enable()
    assert unreachable == 0
