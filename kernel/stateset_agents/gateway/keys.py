"""API keys, stored hashed beside the registry (REGISTRY/.keys.json; deploy refuses entry names starting with a
dot, so it never clashes with an entry).

A key is ``ssa_`` + 32 random bytes (url-safe base64): high entropy, so one SHA-256 is enough (a slow hash guards
guessable passwords, not random keys). The file holds, per key, its id (the first characters, to name it in
listings and revocation), owner, scope (``infer``: inference, the models and the owner's own captures; ``admin``:
everything, every owner's captures and the key list), an optional rate limit, and the hash; the key itself is
printed once by `keys create` and never stored. The file is written atomically with mode 0600.
"""
from __future__ import annotations

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
from ..core.jsonio import load_json, write_json

KEYS_FILE = ".keys.json"
SCOPES = ("infer", "train", "admin")
PREFIX = "ssa_"
SCHEMA = 1
_OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def keys_path(registry: str | os.PathLike) -> Path:
    return Path(registry) / KEYS_FILE


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def check_owner(owner: str) -> str:
    if not isinstance(owner, str) or not _OWNER.match(owner):
        raise InputError(f"an owner is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit; "
                         f"got {owner!r}", field="owner")
    return owner


@dataclass(frozen=True)
class Key:
    id: str
    owner: str
    scope: str
    rate_limit: int | None = None  # requests a minute; None: the server's default

    @property
    def admin(self) -> bool:
        return self.scope == "admin"


def _read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = load_json(path)
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA or not isinstance(data.get("keys"), list):
        raise InputError(f"not a keys file of schema version {SCHEMA}", path=str(path))
    return data["keys"]


def _write(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {"schema_version": SCHEMA, "keys": records})
    os.chmod(path, 0o600)


def create_key(registry: str | os.PathLike, owner: str, scope: str, rate_limit: int | None = None
               ) -> tuple[str, dict[str, Any]]:
    """A new key (returned once, never stored) and its record."""
    check_owner(owner)
    if scope not in SCOPES:
        raise InputError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}", field="scope")
    if rate_limit is not None and rate_limit < 1:
        raise InputError("a rate limit is a positive number of requests a minute", field="rate_limit")
    path = keys_path(registry)
    records = _read(path)
    key = PREFIX + secrets.token_urlsafe(32)
    record = {"id": key[:len(PREFIX) + 8], "owner": owner, "scope": scope, "rate_limit": rate_limit,
              "sha256": _hash(key), "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    _write(path, records + [record])
    return key, {k: v for k, v in record.items() if k != "sha256"}


def list_keys(registry: str | os.PathLike) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "sha256"} for r in _read(keys_path(registry))]


def revoke_key(registry: str | os.PathLike, key_id: str) -> bool:
    path = keys_path(registry)
    records = _read(path)
    kept = [r for r in records if r.get("id") != key_id]
    if len(kept) == len(records):
        return False
    _write(path, kept)
    return True


class KeyStore:
    """The keys a server accepts: the file is read again when it changes, so a key created or revoked while the
    server runs counts from the next request."""

    def __init__(self, registry: str | os.PathLike):
        self._path = keys_path(registry)
        self._stamp: tuple[int, int] | None = None
        self._by_hash: dict[str, Key] = {}
        self._refresh()

    def _refresh(self) -> None:
        try:
            st = self._path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            self._by_hash = {r["sha256"]: Key(r["id"], r["owner"], r["scope"], r.get("rate_limit"))
                             for r in _read(self._path)}
            self._stamp = stamp

    def __len__(self) -> int:
        return len(self._by_hash)

    def lookup(self, key: str | None) -> Key | None:
        if not key:
            return None
        self._refresh()
        digest = _hash(key)
        for stored, record in self._by_hash.items():  # constant time per comparison; a handful of keys
            if hmac.compare_digest(stored, digest):
                return record
        return None
