"""Putting a gateway together (`build`) and running it on uvicorn, in this thread (`serve`, the CLI's) or in a
background thread (`start`, for tests and benchmarks)."""
from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from ..core.registry import get_registry
from . import adapters as adapters_mod
from .capture import DEFAULT_MAX_BYTES, Capture
from .keys import KeyStore, import_legacy


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class Options:
    registry: str | None = None
    base_model: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    capture: str | None = None
    capture_raw: bool = False
    capture_max_bytes: int = DEFAULT_MAX_BYTES
    engine: str | None = None
    engine_config: dict[str, Any] = field(default_factory=dict)
    max_body_bytes: int = 1 << 20
    rate_limit: int = 600
    cors_origins: tuple[str, ...] = ()
    database: str | None = None  # sqlite:///PATH or postgresql://...; default: REGISTRY/.gateway.sqlite3
    state: bool = True  # agents, conversations and jobs (a database); False: inference and capture only
    jobs_dir: str | None = None  # where jobs' runs go; default: REGISTRY/.jobs (else the state directory's)
    roots: tuple[str, ...] = ()  # the folders a client may name files in; default: the working directory


@dataclass
class Gateway:
    app: Any
    engine: Any
    served: dict[str, str]
    skipped: dict[str, str]
    keys: int
    capture: Capture | None
    notes: list[str]
    db: Any = None
    jobs: Any = None

    def close(self) -> None:
        self.engine.close()
        if self.jobs is not None:
            self.jobs.close()
        if self.db is not None:
            self.db.close()


def build(options: Options) -> Gateway:
    """Check the bind, the keys and the registry, start the engine, and make the app (nothing listens yet)."""
    from .db import Database, default_url
    from .paths import Confined

    confined = Confined(options.roots)
    # keys live in the state database: opened first (a registry's old .keys.json imported once), so a public bind
    # without keys is refused before any model loads
    db = Database(options.database or default_url(options.registry))
    try:
        return _build(options, db, confined)
    except BaseException:
        db.close()
        raise


def _build(options: Options, db, confined) -> Gateway:
    from .app import Settings, create_app

    import_legacy(db, options.registry)
    store = KeyStore(db)
    if len(store) == 0:
        store = None
    if store is None and not is_loopback(options.host):
        raise InputError(f"refusing to listen on {options.host} without API keys: create one with `stateset-agents "
                         "keys create --registry DIR --owner NAME --scope infer`, or bind a loopback address",
                         field="host")
    base, served, skipped = adapters_mod.deployed(options.registry, options.base_model)
    spec = get_registry().serving_engine(options.engine)
    engine = spec.load()({**options.engine_config, "base_model": base, "adapters": served})
    notes = []
    capture = None
    if options.capture:
        capture = Capture(options.capture, redact=not options.capture_raw, max_bytes=options.capture_max_bytes)
        notes.append(f"capturing to {options.capture} " + ("RAW: personal data is NOT redacted (--capture-raw)"
                                                          if options.capture_raw else
                                                          "with personal data redacted (ingest's --redact rules)"))
    if store is None:
        notes.append("no API keys: every caller is let in (loopback only)")
    described = {name: adapters_mod.describe(options.registry, name) for name in served}
    settings = Settings(max_body_bytes=options.max_body_bytes, rate_limit=options.rate_limit,
                        cors_origins=tuple(options.cors_origins), models=described)
    key_list = KeyStore(db).records
    jobs = None
    if options.state:
        from .jobs_api import Jobs

        root = options.jobs_dir or (str(Path(options.registry) / ".jobs") if options.registry else None)
        if root is None:
            from ..plugin_api.jobs import state_dir

            root = str(state_dir() / "gateway" / "jobs")
        jobs = Jobs(db, root, confined)
        notes.append(f"state in {db.kind} (schema version {db.versions()[-1]})" +
                     (f"; reattached {len(jobs.reattached)} running training jobs" if jobs.reattached else ""))
    app = create_app(engine, keys=store, capture=capture, settings=settings, key_list=key_list,
                     db=db if options.state else None, jobs=jobs, confined=confined)
    return Gateway(app, engine, served, skipped, len(store) if store else 0, capture, notes, db, jobs)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def serve(gateway: Gateway, host: str, port: int) -> None:
    import uvicorn

    try:
        uvicorn.run(gateway.app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
    finally:
        gateway.close()


class Running:
    """A gateway on uvicorn in a background thread (`stop()` ends it and the engine)."""

    def __init__(self, gateway: Gateway, host: str = "127.0.0.1", port: int | None = None):
        import uvicorn

        self.gateway, self.host, self.port = gateway, host, port or free_port(host)
        self.server = uvicorn.Server(uvicorn.Config(gateway.app, host=host, port=self.port, log_level="warning",
                                                    lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, name="gateway", daemon=True)
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the gateway did not start")
            self.thread.join(0.01)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.gateway.close()


def start(options: Options) -> Running:
    return Running(build(options), options.host, options.port or None)


