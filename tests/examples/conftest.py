"""The example third-party plugins under examples/, installed as a user installs them (scripts/setup does it)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.toy_rewards import make_rows, write_rows
from tests.helpers.state_dir import state_dir  # noqa: F401 - autouse: a private kernel state dir per test


@pytest.fixture()
def curated(tmp_path) -> Path:
    return write_rows(tmp_path / "curated.jsonl", make_rows())


@pytest.fixture()
def held_out(tmp_path) -> Path:
    path = tmp_path / "held_out.txt"
    path.write_text("what is 7 + 8\ncount to three\n")
    return path


def installed(component: str, package: str):
    """The example's spec, found through its own entry point, or a failure that says how to install it."""
    from stateset_agents.core.errors import UnknownComponent
    from stateset_agents.core.registry import get_registry

    try:
        spec = get_registry().resolve(component)
    except UnknownComponent:
        pytest.fail(f"{component} is not installed: pip install ./examples/{package} (scripts/setup does it)")
    assert spec.package == package, spec
    return spec


def require_container(component: str, records: Path | None = None) -> None:
    """A Docker daemon and a recorded image holding `component` (in `records`, else the default records file),
    or, as for every container test, a skip locally and a failure in CI, saying how to get them."""
    import os

    from stateset_agents.core.registry import get_registry
    from stateset_agents.core.runtimes.container import daemon_available, image_for, images_file

    if records is not None:
        os.environ["STATESET_AGENTS_IMAGES"] = str(records)  # the caller's monkeypatch restores it
    why = ("no Docker daemon answers" if not daemon_available() else
           None if image_for(get_registry().resolve(component)) else
           f"no built image holds {component} (records: {images_file()})")
    if why is None:
        return
    hint = "images/ci/prepare builds the images with the examples inside"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI must run the container tests: {why} ({hint})", pytrace=False)
    pytest.skip(f"{why} ({hint})")
