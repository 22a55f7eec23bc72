"""A real gateway on loopback for the gateway tests: the tiny offline model, taught a few answers (so tool calls
are real generations), a LoRA adapter trained on it and deployed by `stateset-agents deploy`, API keys made by
`stateset-agents keys create`, and capture on (redaction on: the capture tests start their own raw server)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from tests.gateway.gateway_helpers import taught_conversations, teach  # noqa: E402

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
ADAPTER = "support-v1"


@dataclass
class Served:
    url: str
    base: str
    adapter: str
    keys: dict[str, str]
    registry: Path
    capture: Path
    running: object


@pytest.fixture(scope="session")
def taught_model(tiny_model_dir, tmp_path_factory):
    return teach(tiny_model_dir, tmp_path_factory.mktemp("taught"), taught_conversations())


@pytest.fixture(scope="session")
def registry(taught_model, tmp_path_factory):
    """A registry holding one adapter (2 GRPO updates on the taught model), deployed by the CLI."""
    from stateset_agents.cli import main
    from tests.evidence.evidence_helpers import write_jsonl
    from tests.helpers.toy_rewards import DigitReward, make_rows

    from stateset_plugins.trainers.run import train_run

    root = tmp_path_factory.mktemp("gateway")
    data = write_jsonl(root / "curated.jsonl", make_rows())
    request = {"algorithm": "grpo", "dataset": str(data), "base_model": str(taught_model), "output": str(root / "run"),
               "config": {"steps": 2, "max_new_tokens": 8, "batch_size": 2, "num_generations": 4,
                          "learning_rate": 2e-2, "save_every": 2}, "seed": 0}
    events = list(train_run(request, reward=DigitReward()))
    assert events[-1]["type"] == "completed", events[-1]
    assert main(["deploy", str(root / "run"), "--to", str(root / "registry"), "--name", ADAPTER, "--force"]) == 0
    return root / "registry"


@pytest.fixture(scope="session")
def served(registry, tmp_path_factory):
    from stateset_agents.gateway.keys import create_key
    from stateset_agents.gateway.server import Options, start

    keys = {"alice": create_key(registry, "alice", "infer")[0], "bob": create_key(registry, "bob", "infer")[0],
            "admin": create_key(registry, "ops", "admin")[0]}
    capture = tmp_path_factory.mktemp("capture")
    running = start(Options(registry=str(registry), port=0, capture=str(capture),
                            engine_config={"max_new_tokens": 64, "max_prompt_tokens": 512}))
    base = next(m["id"] for m in running.gateway.engine.models() if m["kind"] == "base")
    yield Served(running.url, base, ADAPTER, keys, registry, capture, running)
    running.stop()


POSTGRES_URL = os.environ.get("STATESET_TEST_POSTGRES", "postgresql://stateset:stateset@127.0.0.1:5432/postgres")


def _postgres_database():
    """A fresh database on the test PostgreSQL (scripts/system-deps starts Debian's cluster and its role); under
    CI=true a missing server fails, elsewhere the tests skip saying why."""
    import secrets

    try:
        import psycopg

        admin = psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)
    except Exception as exc:  # ImportError or a connection refused
        why = f"no PostgreSQL at {POSTGRES_URL} ({type(exc).__name__}: {str(exc).strip()[:160]}); scripts/system-deps starts one"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    name = f"gateway_{secrets.token_hex(6)}"
    admin.execute(f"CREATE DATABASE {name}")
    base = POSTGRES_URL.rsplit("/", 1)[0]
    return f"{base}/{name}", lambda: (admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"), admin.close())


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def database(request, tmp_path_factory):
    """A state database URL: a SQLite file, then a real PostgreSQL database (the same tests on both)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'gateway.sqlite3'}"
        return
    url, drop = _postgres_database()
    yield url
    drop()
