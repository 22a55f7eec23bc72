"""The gateway's state database: API keys (`keys`), agents, training jobs and the conversation index. SQLite by
default (REGISTRY/.gateway.sqlite3), PostgreSQL with ``--database postgresql://...`` (psycopg 3).

One small dialect: SQL is written with ``?`` placeholders and portable types (TEXT, INTEGER, DOUBLE PRECISION);
PostgreSQL gets ``%s``. Schema migrations are numbered lists of statements applied once each, recorded in
``schema_migrations`` inside the same transaction, under a lock (PostgreSQL: an advisory lock; SQLite: BEGIN
IMMEDIATE), so two gateways starting together migrate once.

A claim is one conditional UPDATE (``... WHERE id = ? AND state = 'queued'``): the row count says who won, on both
databases, which is how a job is never started twice.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from ..core.errors import InputError

DB_FILE = ".gateway.sqlite3"
_LOCK_KEY = 724_611_021  # the advisory lock the migrations take on PostgreSQL

MIGRATIONS: list[tuple[int, list[str]]] = [
    (1, [
        "CREATE TABLE agents (id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, "
        "system_prompt TEXT NOT NULL, tools TEXT NOT NULL, model TEXT NOT NULL, reward TEXT, "
        "created_at DOUBLE PRECISION NOT NULL, updated_at DOUBLE PRECISION NOT NULL, UNIQUE (owner, name))",
        "CREATE TABLE conversations (id TEXT PRIMARY KEY, owner TEXT NOT NULL, agent TEXT, conversation_id TEXT, "
        "model TEXT NOT NULL, api TEXT NOT NULL, file TEXT, line_offset INTEGER, line_bytes INTEGER, "
        "score DOUBLE PRECISION, score_detail TEXT, prompt_tokens INTEGER, completion_tokens INTEGER, "
        "created_at DOUBLE PRECISION NOT NULL)",
        "CREATE INDEX conversations_by_owner ON conversations (owner, created_at)",
        "CREATE INDEX conversations_by_agent ON conversations (owner, agent, created_at)",
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, owner TEXT NOT NULL, kind TEXT NOT NULL, state TEXT NOT NULL, "
        "request TEXT NOT NULL, job_dir TEXT NOT NULL, claimed_by TEXT, pid INTEGER, pid_start TEXT, "
        "run_id TEXT, quote TEXT, metrics TEXT, message TEXT, stop_requested INTEGER NOT NULL DEFAULT 0, "
        "attempts INTEGER NOT NULL DEFAULT 0, created_at DOUBLE PRECISION NOT NULL, "
        "updated_at DOUBLE PRECISION NOT NULL)",
        "CREATE INDEX jobs_by_owner ON jobs (owner, created_at)",
        "CREATE INDEX jobs_by_state ON jobs (state)",
    ]),
    (2, [  # keys move from REGISTRY/.keys.json into the database (`keys.import_legacy` brings the file over)
        "CREATE TABLE api_keys (id TEXT PRIMARY KEY, owner TEXT NOT NULL, scope TEXT NOT NULL, rate_limit INTEGER, "
        "secret_hash TEXT NOT NULL UNIQUE, source TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, "
        "revoked_at DOUBLE PRECISION)",
        "CREATE INDEX api_keys_by_owner ON api_keys (owner)",
        "CREATE TABLE key_imports (path TEXT PRIMARY KEY, imported_at DOUBLE PRECISION NOT NULL, "
        "keys INTEGER NOT NULL)",
    ]),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]
JSON_COLUMNS = ("tools", "reward", "score_detail", "request", "quote", "metrics")


def default_url(registry: str | os.PathLike | None) -> str:
    if registry:
        return f"sqlite:///{Path(registry).resolve() / DB_FILE}"
    from ..plugin_api.jobs import state_dir

    return f"sqlite:///{state_dir() / 'gateway' / DB_FILE}"


class Database:
    """One connection, used under a lock (the gateway's queries are small; a pool would buy nothing here)."""

    def __init__(self, url: str):
        self.url = url
        self._lock = threading.RLock()
        if url.startswith(("postgresql://", "postgres://")):
            try:
                import psycopg
            except ImportError:
                raise InputError("--database postgresql://... needs psycopg: pip install 'psycopg[binary]'",
                                 field="database") from None
            self.kind = "postgresql"
            try:
                self._conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
            except psycopg.OperationalError as exc:
                raise InputError(f"cannot connect to the database: {str(exc).strip().splitlines()[0]}",
                                 field="database") from None
        elif url.startswith("sqlite:///"):
            path = Path(url[len("sqlite:///"):])
            path.parent.mkdir(parents=True, exist_ok=True)
            # key hashes and who said what live here: owner-only (SQLite gives its -wal and -shm files the same)
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
            self.kind = "sqlite"
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA busy_timeout=30000")
        else:
            raise InputError(f"--database must be sqlite:///PATH or postgresql://..., got {url!r}", field="database")
        self.migrate()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.kind == "postgresql" else sql

    def _run(self, sql: str, params: Sequence[Any] = ()):
        cur = self._conn.cursor()
        cur.execute(self._sql(sql), tuple(params))
        return cur

    def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        with self._lock:
            cur = self._run(sql, params)
            count = cur.rowcount
            cur.close()
            return count

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._run(sql, params)
            names = [d[0] for d in cur.description]
            rows = [decode(dict(zip(names, row))) for row in cur.fetchall()]
            cur.close()
            return rows

    def one(self, sql: str, params: Sequence[Any] = ()) -> dict[str, Any] | None:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    @contextmanager
    def transaction(self) -> Iterator["Database"]:
        """One transaction (SQLite: BEGIN IMMEDIATE, so writers queue at its start); the statements inside run on
        this thread, under the lock."""
        with self._lock:
            self._run("BEGIN IMMEDIATE" if self.kind == "sqlite" else "BEGIN").close()
            try:
                yield self
            except BaseException:
                self._run("ROLLBACK").close()
                raise
            self._run("COMMIT").close()

    def migrate(self) -> int:
        """Apply the migrations not yet applied; the schema version now."""
        with self._lock:
            if self.kind == "postgresql":
                self._run("SELECT pg_advisory_lock(?)", (_LOCK_KEY,)).close()
            try:
                with self.transaction():
                    self._run("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                              "applied_at DOUBLE PRECISION NOT NULL)").close()
                    cur = self._run("SELECT version FROM schema_migrations")
                    done = {row[0] for row in cur.fetchall()}
                    cur.close()
                    if done and max(done) > SCHEMA_VERSION:
                        raise InputError(f"the database's schema is version {max(done)}, newer than this "
                                         f"gateway's {SCHEMA_VERSION}: upgrade stateset-agents", field="database")
                    for version, statements in MIGRATIONS:
                        if version in done:
                            continue
                        for statement in statements:
                            self._run(statement).close()
                        self._run("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                                  (version, time.time())).close()
            finally:
                if self.kind == "postgresql":
                    self._run("SELECT pg_advisory_unlock(?)", (_LOCK_KEY,)).close()
            return SCHEMA_VERSION

    def versions(self) -> list[int]:
        return [r["version"] for r in self.query("SELECT version FROM schema_migrations ORDER BY version")]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def encode(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def decode(row: dict[str, Any]) -> dict[str, Any]:
    for name in JSON_COLUMNS:
        if isinstance(row.get(name), str):
            row[name] = json.loads(row[name])
    return row


def where(filters: Iterable[tuple[str, Any]]) -> tuple[str, list[Any]]:
    """' WHERE a AND b' and its parameters from (clause with one ?, value) pairs whose value is not None."""
    clauses, params = [], []
    for clause, value in filters:
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params
