"""First-party rewards: `gsm8k`, `tool_calling`, `customer_support` and `nsr` (see docs/rewards.md).

Registered by lazy "module:attr" paths: listing the components (`plugins list`, a command's `--help`) imports no
reward module. Each registration repeats its class's name and version; loading the class checks they agree.
"""
from stateset_agents import hookimpl

_REWARDS = (  # (module, class, name, version)
    ("gsm8k", "GSM8KReward", "gsm8k", "1.0.0"),
    ("tool_calling", "ToolCallingReward", "tool_calling", "2.4.0"),
    ("customer_support", "CustomerSupportReward", "customer_support", "2.2.0"),
    ("nsr", "NSRReward", "nsr", "1.3.0"),
)
__all__ = [cls for _, cls, _, _ in _REWARDS]


def __getattr__(attr: str):
    for module, cls, _, _ in _REWARDS:
        if attr == cls:
            import importlib

            return getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


@hookimpl
def register_rewards(register):
    for module, cls, name, version in _REWARDS:
        register(f"{__name__}.{module}:{cls}", name=name, version=version)
