"""Container tests need a Docker daemon and the `plugins` image (`stateset-agents images build plugins`); the
trainer image's tests need the CPU build of the `trainer` image (`stateset-agents images build trainer --cpu`,
recorded in TRAINER_RECORDS by images/ci/prepare).

In CI (CI=true) their absence is a failure, never a skip: `.ci/run` starts dockerd and builds both images first
(images/ci/prepare). Locally they skip, saying what to start or build.
"""
from __future__ import annotations

import pytest

from tests.helpers.container_fixtures import docker_client, plugins_image  # noqa: F401 - shared fixtures
from tests.helpers.container_fixtures import unavailable as _unavailable
from tests.helpers.images import TRAINER_RECORDS

TRAINER_HINT = (f"images/ci/docker-up && images/base/build-base && STATESET_AGENTS_IMAGES={TRAINER_RECORDS} "
                "stateset-agents images build trainer --cpu --base stateset-base:bookworm")


@pytest.fixture(scope="session")
def trainer_image(docker_client):
    """The CPU build of the `trainer` image (`images build trainer --cpu`), checked to still exist: its record and
    the records file holding it (TRAINER_RECORDS, else the default records)."""
    import json

    from stateset_agents.core.runtimes.container import images_file

    found = None
    for path in (TRAINER_RECORDS, images_file()):
        try:
            record = json.loads(path.read_text()).get("images", {}).get("trainer")
        except (OSError, ValueError):
            continue
        if record is not None and record.get("device") == "cpu":
            found = (record, path)
            break
    if found is None:
        _unavailable(f"no CPU build of the trainer image is recorded in {TRAINER_RECORDS} or {images_file()}",
                     TRAINER_HINT)
    record, path = found
    try:
        docker_client.images.get(record["id"])
    except Exception:  # noqa: BLE001 - pruned since it was built
        _unavailable(f"the recorded trainer image {record['id'][:19]} is gone from the daemon", TRAINER_HINT)
    return {**record, "records_file": str(path)}
