"""First-party rewards: `gsm8k`, `tool_calling`, `customer_support` and `nsr` (see docs/rewards.md)."""
from stateset_agents import hookimpl

from .customer_support import CustomerSupportReward
from .gsm8k import GSM8KReward
from .nsr import NSRReward
from .tool_calling import ToolCallingReward

__all__ = ["CustomerSupportReward", "GSM8KReward", "NSRReward", "ToolCallingReward"]


@hookimpl
def register_rewards(register):
    register(GSM8KReward)
    register(ToolCallingReward)
    register(CustomerSupportReward)
    register(NSRReward)
