"""Helpers shared across the test directories, imported as `from tests.helpers.<module> import ...` (a helper used
by one directory only lives beside its tests, imported as `tests.<dir>.<module>`)."""
