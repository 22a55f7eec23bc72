"""Constants the provider tests import by name (never `from conftest import`, which depends on load order)."""

IMAGE = "ghcr.io/stateset/trainer@sha256:" + "ab" * 32

#: The faults the provider fakes inject (`fail_call`): refused, answered too late, dropped, cut mid-answer.
FAULTS = ("500", "timeout", "drop", "partial")
