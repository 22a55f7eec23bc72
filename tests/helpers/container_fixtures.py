"""The Docker fixtures of every test directory that starts containers (tests/containers, tests/security,
tests/faults): a daemon and the recorded `plugins` image. In CI (CI=true) their absence is a failure, never a skip;
locally they skip, saying what to start or build. A conftest imports them: `from tests.helpers.container_fixtures
import docker_client, plugins_image`."""
from __future__ import annotations

import os

import pytest

HINT = ("images/ci/docker-up && images/base/build-base && stateset-agents images build plugins "
        "--base stateset-base:bookworm --plugin examples/stateset-reward-politeness")


def unavailable(reason: str, hint: str = HINT):
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run the container tests: {reason}", pytrace=False)
    pytest.skip(f"{reason} (to run them: {hint})")


@pytest.fixture(scope="session")
def docker_client():
    from stateset_agents.core.errors import StatesetError
    from stateset_agents.core.runtimes.container import docker_client as client

    try:
        return client()
    except StatesetError as exc:
        unavailable(str(exc))


@pytest.fixture(scope="session")
def plugins_image(docker_client):
    """The recorded `plugins` image, checked to still exist in the daemon."""
    from stateset_agents.core.runtimes.container import images_file, read_images

    record = read_images().get("plugins")
    if record is None:
        unavailable(f"no plugins image is recorded in {images_file()}")
    try:
        docker_client.images.get(record["id"])
    except Exception:  # noqa: BLE001 - pruned since it was built
        unavailable(f"the recorded plugins image {record['id'][:19]} is gone from the daemon")
    return record
