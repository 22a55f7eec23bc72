"""Fixtures for the fault tests: a private state dir, and for the container cases an image that holds the fault
plugins (the recorded `plugins` image plus tests/support_plugins/stateset_fault_plugins.py, one layer on top),
recorded in a records file of its own so nothing else serves from it."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from tests.helpers.container_fixtures import unavailable as _unavailable
from tests.helpers.state_dir import state_dir  # noqa: F401 - autouse: a private kernel state dir per test

FAULTS = Path(__file__).resolve().parents[1] / "support_plugins" / "stateset_fault_plugins.py"
TAG = "stateset-agents-faults:test"
COMPONENTS = ["reward:test_fault", "trainer:test_fault"]


@pytest.fixture(scope="session")
def faults_image_record(tmp_path_factory):
    """The fault plugins in the plugins image: built once a session (a COPY layer, about a second)."""
    from stateset_agents.core.errors import StatesetError
    from stateset_agents.core.runtimes.container import docker_client as client, read_images

    try:
        docker_client = client()
    except StatesetError as exc:
        _unavailable(str(exc))
    plugins_image = read_images().get("plugins")
    if plugins_image is None:
        _unavailable("no plugins image is recorded")
    dockerfile = (f"FROM {plugins_image['id']}\n"
                  "COPY stateset_fault_plugins.py /opt/faults/stateset_fault_plugins.py\n"
                  "ENV PYTHONPATH=/opt/faults STATESET_AGENTS_PLUGIN_MODULES=stateset_fault_plugins\n")
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile.encode()), ("stateset_fault_plugins.py", FAULTS.read_bytes())):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    image, _ = docker_client.images.build(fileobj=context, custom_context=True, tag=TAG, rm=True)
    records = tmp_path_factory.mktemp("faults-image") / "images.json"
    records.write_text(json.dumps({"schema_version": 1, "images": {"faults": {
        **plugins_image, "id": image.id, "tag": TAG, "role": "faults", "components": COMPONENTS}}}))
    return records


@pytest.fixture()
def faults_image(faults_image_record, monkeypatch):
    monkeypatch.setenv("STATESET_AGENTS_IMAGES", str(faults_image_record))
    return faults_image_record
