"""API keys, in the gateway's state database (`db`: SQLite beside the registry by default, PostgreSQL with
``--database``), table ``api_keys``.

A key is ``ssa_`` + 32 random bytes (url-safe base64): high entropy, so one SHA-256 is enough (a slow hash guards
guessable passwords, not random keys, and would cost every request its time). A row holds the key's id (its first
12 characters, to name it in listings and revocation), owner, scope (``infer``: inference, agents, the owner's
captures and conversations; ``train``: that and training jobs; ``admin``: everything, every owner's), an optional
rate limit, the hash, and when it was created and revoked; the key itself is printed once by `keys create` and never
stored. A revoked key keeps its row (so a re-import can never bring it back).

Before this table, keys lived in REGISTRY/.keys.json (the same hashes). Opening the keys of a registry imports that
file once, in one transaction, records the import in ``key_imports`` and renames the file to
``.keys.json.imported``; it is not read again.
"""
from __future__ import annotations

import calendar
import hashlib
import hmac
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import InputError
from .db import DB_FILE, Database, default_url

LEGACY_FILE = ".keys.json"
SCOPES = ("infer", "train", "admin")  # each includes the ones before it
PREFIX = "ssa_"
ID_CHARS = len(PREFIX) + 8
_OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_COLUMNS = "id, owner, scope, rate_limit, created_at, revoked_at"


def keys_path(registry: str | os.PathLike) -> Path:
    """Where a registry's keys are by default (the state database's SQLite file), to name it in messages."""
    return Path(registry) / DB_FILE


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def check_owner(owner: str) -> str:
    if not isinstance(owner, str) or not _OWNER.match(owner):
        raise InputError(f"an owner is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit; "
                         f"got {owner!r}", field="owner")
    return owner


def has_scope(scope: str, needed: str) -> bool:
    return scope in SCOPES and SCOPES.index(scope) >= SCOPES.index(needed)


@dataclass(frozen=True)
class Key:
    id: str
    owner: str
    scope: str
    rate_limit: int | None = None  # requests a minute; None: the server's default

    @property
    def admin(self) -> bool:
        return self.scope == "admin"


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _public(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": row["id"], "owner": row["owner"], "scope": row["scope"], "rate_limit": row["rate_limit"],
            "created_at": _iso(row["created_at"]), "revoked_at": _iso(row["revoked_at"])}


def import_legacy(db: Database, registry: str | os.PathLike | None) -> int:
    """Import REGISTRY/.keys.json once (the keys not yet in the table; a revoked one stays revoked), then rename
    it so it is never read again; the number of keys imported."""
    if not registry:
        return 0
    path = Path(registry).resolve() / LEGACY_FILE
    if not path.is_file() or db.one("SELECT path FROM key_imports WHERE path = ?", (str(path),)):
        return 0
    from ..core.jsonio import load_json

    data = load_json(path)
    if not isinstance(data, dict) or data.get("schema_version") != 1 or not isinstance(data.get("keys"), list):
        raise InputError("not a keys file of schema version 1", path=str(path))
    rows = []
    for n, r in enumerate(data["keys"]):
        ok = isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("id", "owner", "scope", "sha256"))
        if not ok or r["scope"] not in SCOPES or not re.fullmatch(r"[0-9a-f]{64}", r["sha256"]):
            raise InputError(f"keys[{n}] is not a key record (id, owner, scope, sha256)", path=str(path),
                             field=f"keys[{n}]")
        try:
            created = calendar.timegm(time.strptime(r.get("created_at", ""), "%Y-%m-%dT%H:%M:%SZ"))
        except ValueError:
            created = time.time()
        rate = r.get("rate_limit") if isinstance(r.get("rate_limit"), int) else None
        rows.append((r["id"], r["owner"], r["scope"], rate, r["sha256"], float(created)))
    imported = 0
    with db.transaction():
        if db.one("SELECT path FROM key_imports WHERE path = ?", (str(path),)):  # another process won the race
            return 0
        for row in rows:
            imported += db.execute("INSERT INTO api_keys (id, owner, scope, rate_limit, secret_hash, created_at, "
                                   "source) VALUES (?, ?, ?, ?, ?, ?, 'keys.json') ON CONFLICT DO NOTHING", row)
        db.execute("INSERT INTO key_imports (path, imported_at, keys) VALUES (?, ?, ?)",
                   (str(path), time.time(), imported))
    try:
        os.replace(path, path.with_name(LEGACY_FILE + ".imported"))
    except OSError:  # a read-only registry: key_imports already says the file is done
        pass
    return imported


def open_keys(registry: str | os.PathLike | None, database: str | None = None) -> Database:
    """The database holding a registry's keys (`database`, else REGISTRY/.gateway.sqlite3), its legacy keys file
    imported."""
    db = Database(database or default_url(registry))
    try:
        import_legacy(db, registry)
    except BaseException:
        db.close()
        raise
    return db


class KeyStore:
    """The keys a server accepts, read from the database on each lookup, so a key created or revoked while the
    server runs counts from the next request. Give it the server's Database, or a registry (and optionally a
    database URL) to open one of its own."""

    def __init__(self, source: Database | str | os.PathLike, database: str | None = None):
        self._own = not isinstance(source, Database)
        self.db = open_keys(source, database) if self._own else source

    def __len__(self) -> int:
        return int(self.db.one("SELECT COUNT(*) AS n FROM api_keys WHERE revoked_at IS NULL")["n"])

    def lookup(self, key: str | None) -> Key | None:
        if not key or not isinstance(key, str) or len(key) > 256:
            return None
        digest = _hash(key)
        # found by its hash: what an index lookup's timing could tell is about the hash, not the key
        row = self.db.one("SELECT id, owner, scope, rate_limit, secret_hash FROM api_keys WHERE secret_hash = ? "
                          "AND revoked_at IS NULL", (digest,))
        if row is None or not hmac.compare_digest(row["secret_hash"], digest):
            return None
        return Key(row["id"], row["owner"], row["scope"], row["rate_limit"])

    def create(self, owner: str, scope: str, rate_limit: int | None = None) -> tuple[str, dict[str, Any]]:
        """A new key (returned once, never stored) and its public record."""
        check_owner(owner)
        if scope not in SCOPES:
            raise InputError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}", field="scope")
        if rate_limit is not None and (isinstance(rate_limit, bool) or rate_limit < 1):
            raise InputError("a rate limit is a positive number of requests a minute", field="rate_limit")
        key = PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        self.db.execute("INSERT INTO api_keys (id, owner, scope, rate_limit, secret_hash, created_at, source) "
                        "VALUES (?, ?, ?, ?, ?, ?, 'create')", (key[:ID_CHARS], owner, scope, rate_limit,
                                                                 _hash(key), now))
        return key, _public({"id": key[:ID_CHARS], "owner": owner, "scope": scope, "rate_limit": rate_limit,
                             "created_at": now, "revoked_at": None})

    def records(self, include_revoked: bool = True) -> list[dict[str, Any]]:
        clause = "" if include_revoked else " WHERE revoked_at IS NULL"
        return [_public(r) for r in self.db.query(f"SELECT {_COLUMNS} FROM api_keys{clause} ORDER BY created_at, id")]

    def revoke(self, key_id: str) -> bool:
        """Revoke a key; False when no live key has that id."""
        return self.db.execute("UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
                               (time.time(), key_id)) == 1

    def close(self) -> None:
        if self._own:
            self.db.close()


def create_key(registry: str | os.PathLike, owner: str, scope: str, rate_limit: int | None = None,
               database: str | None = None) -> tuple[str, dict[str, Any]]:
    store = KeyStore(registry, database)
    try:
        return store.create(owner, scope, rate_limit)
    finally:
        store.close()


def list_keys(registry: str | os.PathLike, database: str | None = None) -> list[dict[str, Any]]:
    store = KeyStore(registry, database)
    try:
        return store.records()
    finally:
        store.close()


def revoke_key(registry: str | os.PathLike, key_id: str, database: str | None = None) -> bool:
    store = KeyStore(registry, database)
    try:
        return store.revoke(key_id)
    finally:
        store.close()
