"""What both of `tool_calling`'s modes score a call by: the per-check keys, the retry credit, and their means."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# A call that repeats a failed one unchanged keeps this share of its score: a wasted call, but nothing invented.
RETRY_CREDIT = 0.5
# Per-check keys averaged over a turn's calls to the top level of the breakdown (what `improve calibrate` weighs).
CALL_CHECKS = ("schema", "grounded", "ok", "fresh", "consent")
UNGROUNDED = "values found nowhere in what the user said, a tool returned or the system prompt stated"


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def call_means(checks: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Each per-call check averaged over the calls that have it: the turn's top-level numeric breakdown."""
    if len(checks) == 1:  # the usual turn: one call, whose checks are their own means
        only = checks[0]
        # 0.0 + v is `mean((v,))` (sum starts from 0, so a -0.0 becomes 0.0 there too), without the calls
        return {key: 0.0 + only[key] for key in CALL_CHECKS if key in only}
    means = {}
    for key in CALL_CHECKS:
        values = [c[key] for c in checks if key in c]
        if values:
            means[key] = mean(values)
    return means
