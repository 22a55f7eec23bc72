import subprocess
import sys


def test_register_rewards_registers_the_four_rewards_lazily_and_each_loads_as_registered():
    from stateset_agents.core.registry import Registry, _make_register
    from stateset_plugins import rewards

    registry = Registry()
    rewards.register_rewards(_make_register(registry, "reward", "rewards", "stateset-agents"))
    specs = registry.all("reward")
    assert {s.name for s in specs} == {"gsm8k", "tool_calling", "customer_support", "nsr"}
    assert all(isinstance(s.target, str) for s in specs)  # listing them imports no reward module
    for spec in specs:
        cls = spec.load_class()
        assert (cls.name, cls.version) == (spec.name, spec.version)


def test_a_lazy_registration_whose_version_differs_from_its_class_is_refused():
    import pytest

    from stateset_agents.core.errors import StatesetError
    from stateset_agents.core.registry import Registry, _make_register

    registry = Registry()
    _make_register(registry, "reward", "p", "pkg")("stateset_plugins.rewards.gsm8k:GSM8KReward", name="gsm8k",
                                                   version="0.0.1")
    with pytest.raises(StatesetError, match="version '0.0.1'.*says '1.0.0'"):
        registry.resolve("reward:gsm8k").load_class()


def test_import_is_light():
    code = "import sys, stateset_plugins.rewards; print(sorted(m for m in ('torch', 'numpy', 'transformers') " \
           "if m in sys.modules) + sorted(m for m in sys.modules if m.startswith('stateset_plugins.rewards.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
