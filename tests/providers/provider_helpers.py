"""Constants the provider tests import by name (never `from conftest import`, which depends on load order)."""

IMAGE = "ghcr.io/stateset/trainer@sha256:" + "ab" * 32
