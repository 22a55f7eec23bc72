"""The third-party example under examples/ is installed (scripts/setup does it) and passes the same contract."""
from stateset_agents import GradeItem
from stateset_agents.runtimes import load_component


def test_example_plugin_is_discovered_through_its_own_entry_point(registry):
    spec = registry.resolve("reward:politeness")
    assert spec.package == "stateset-reward-politeness" and spec.plugin == "politeness"


def test_example_plugin_runs_unchanged_out_of_process():
    conv = {"id": "c", "messages": [{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": "Thanks for asking, happy to help!"}]}
    with load_component("politeness") as local, load_component("politeness", runtime="subprocess") as remote:
        assert remote.grade([GradeItem(conv)]) == local.grade([GradeItem(conv)])
        assert local.grade([GradeItem(conv)])[0]["score"] == 1.0
