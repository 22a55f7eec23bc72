"""Hypothesis profiles for the property-based tests: `ci` (the default) is small and derandomized, so CI stays fast
and gives the same examples on every run; `long` (HYPOTHESIS_PROFILE=long) searches far more, for nightly use."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

LONG_FACTOR = 50  # `long` tries this many times more examples than `ci`

settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("long", deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def examples(ci_count: int) -> settings:
    """`@examples(40)`: a test's own example budget, 40 under `ci` and LONG_FACTOR times that under `long`."""
    return settings(max_examples=ci_count * (LONG_FACTOR if PROFILE == "long" else 1))
