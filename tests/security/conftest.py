"""The security tests: one test per claim in SECURITY.md (repo root), each naming the boundary it proves."""
from __future__ import annotations

from tests.helpers.state_dir import state_dir  # noqa: F401 - autouse: a private kernel state dir per test
from tests.helpers.container_fixtures import docker_client, plugins_image  # noqa: F401 - for test_containers
