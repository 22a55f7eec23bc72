"""First-party industry recipes (`stateset-agents industry list | show | prepare`; docs/industry.md).

Each recipe is a domain's tool schemas, an `nsr` policy, reward configs, the policy in prose and a deterministic
generator of labelled support logs. Registered by "module:attr", so `industry list` imports no recipe module.
"""
from stateset_agents import hookimpl

_RECIPES = (  # (module, name, version, summary)
    ("airline", "airline", "1.0.0", "Airline support: cancellations, compensation, reservations, hand-offs "
                                    "(the shipped airline policy, unchanged)"),
    ("retail", "retail", "1.0.0", "Retail orders and returns: cancellations, item returns and refunds, tracking"),
    ("saas_billing", "saas_billing", "1.0.0", "SaaS billing: plan changes, double-charge refunds, invoices"),
    ("telecom", "telecom", "1.0.0", "Telecom troubleshooting: diagnostics, line resets, outage credits"),
    ("banking", "banking", "1.0.0", "Banking card disputes: card freezes, disputed charges, dispute status"),
)


@hookimpl
def register_recipes(register):
    for module, name, version, summary in _RECIPES:
        register(f"{__name__}.{module}:RECIPE", name=name, version=version, summary=summary)
