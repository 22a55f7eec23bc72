import subprocess
import sys


def test_register_rewards_registers_the_four_classes():
    from stateset_plugins import rewards

    registered = []
    rewards.register_rewards(registered.append)
    assert {cls.name for cls in registered} == {"gsm8k", "tool_calling", "customer_support", "nsr"}
    assert all(cls.version for cls in registered)


def test_import_is_light():
    code = "import sys, stateset_plugins.rewards; print(sorted(m for m in ('torch', 'numpy', 'transformers') " \
           "if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
