"""Fault tests with real processes: SIGKILL at chosen points and a full disk, for ingest, improve, train, deploy."""
from tests.helpers.state_dir import state_dir  # noqa: F401

import pytest  # noqa: E402

from .training_runs import reference_run, write_train_inputs  # noqa: E402


@pytest.fixture(scope="session")
def train_inputs(tiny_model_dir, tmp_path_factory):
    return write_train_inputs(tiny_model_dir, tmp_path_factory.mktemp("train-inputs"))


@pytest.fixture(scope="session")
def trained(train_inputs, tmp_path_factory) -> dict:
    """The uninterrupted run every train and deploy test compares with (run once, maybe by a test meanwhile)."""
    return reference_run(train_inputs, tmp_path_factory.mktemp("trained"))
