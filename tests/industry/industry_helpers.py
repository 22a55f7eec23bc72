"""What the industry tests share."""
from __future__ import annotations

#: The first-party recipes (plugins/stateset_plugins/recipes).
FIRST_PARTY = ("airline", "retail", "saas_billing", "telecom", "banking")
