"""API keys in the state database, on SQLite and on a real PostgreSQL: `keys create/list/revoke` (the CLI) write
rows holding the key's SHA-256 (never the key), owner, scope and times; a revoked key is refused by a store already
open (a running server) from its next lookup; a registry's old .keys.json is imported once, then never read."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from stateset_agents.cli import main
from stateset_agents.core.errors import InputError
from stateset_agents.gateway.db import Database
from stateset_agents.gateway.keys import KeyStore, create_key


def _cli(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(argv))
    return code, capsys.readouterr().out


def _legacy(registry: Path, secrets: dict[str, str]) -> None:
    """A keys file as the releases before the database wrote it: {owner: secret}."""
    registry.mkdir(parents=True, exist_ok=True)
    records = [{"id": key[:12], "owner": owner, "scope": "train", "rate_limit": 5,
                "sha256": hashlib.sha256(key.encode()).hexdigest(), "created_at": "2026-01-02T03:04:05Z"}
               for owner, key in secrets.items()]
    (registry / ".keys.json").write_text(json.dumps({"schema_version": 1, "keys": records}))


def test_the_cli_keeps_keys_hashed_in_the_database_and_revokes_them(database, tmp_path, capsys):
    registry = tmp_path / "registry"
    code, out = _cli(capsys, "keys", "create", "--registry", str(registry), "--database", database,
                     "--owner", "alice", "--scope", "train", "--rate-limit", "7")
    assert code == 0
    key = out.split()[0]
    db = Database(database)
    try:
        [row] = db.query("SELECT * FROM api_keys WHERE owner = 'alice'")
        assert row["secret_hash"] == hashlib.sha256(key.encode()).hexdigest()
        assert key not in json.dumps(row) and row["id"] == key[:12]
        assert (row["scope"], row["rate_limit"], row["source"], row["revoked_at"]) == ("train", 7, "create", None)
        assert row["created_at"] > 0
        server = KeyStore(db)  # a running server's store, open across the revocation below
        assert server.lookup(key).owner == "alice" and server.lookup(key).scope == "train"
        assert server.lookup(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
        code, out = _cli(capsys, "keys", "list", "--registry", str(registry), "--database", database)
        assert code == 0 and f"{key[:12]}  alice  train  7" in out and key not in out
        code, out = _cli(capsys, "keys", "revoke", "--registry", str(registry), "--database", database, key[:12])
        assert code == 0 and "revoked" in out
        assert server.lookup(key) is None
        assert "alice" not in {r["owner"] for r in server.records(include_revoked=False)}
        [row] = db.query("SELECT * FROM api_keys WHERE owner = 'alice'")
        assert row["revoked_at"] >= row["created_at"]
        code, out = _cli(capsys, "keys", "list", "--registry", str(registry), "--database", database)
        assert "revoked 20" in out
        code, _ = _cli(capsys, "keys", "revoke", "--registry", str(registry), "--database", database, key[:12])
        assert code == 1
    finally:
        db.close()


def test_a_legacy_keys_file_is_imported_once_and_then_never_read(database, tmp_path):
    registry = tmp_path / "registry"
    old, later = "ssa_" + "o" * 43, "ssa_" + "l" * 43
    _legacy(registry, {"olga": old})
    store = KeyStore(registry, database)
    try:
        key = store.lookup(old)
        assert (key.owner, key.scope, key.rate_limit) == ("olga", "train", 5)
        assert not (registry / ".keys.json").exists() and (registry / ".keys.json.imported").exists()
        assert store.records(include_revoked=False)[0]["created_at"] == "2026-01-02T03:04:05Z"
        assert store.revoke(old[:12])
    finally:
        store.close()
    # a keys file written again at the same place (an older release, a restored backup) is not read
    _legacy(registry, {"olga": old, "lev": later})
    store = KeyStore(registry, database)
    try:
        assert store.lookup(old) is None and store.lookup(later) is None  # the revoked key stays revoked
        assert (registry / ".keys.json").exists()
        owners = [r["owner"] for r in store.records()]
        assert owners.count("olga") == 1 and "lev" not in owners
    finally:
        store.close()


def test_bad_key_input_and_a_broken_legacy_file_are_refused_naming_the_field(database, tmp_path):
    registry = tmp_path / "registry"
    with pytest.raises(InputError) as caught:
        create_key(registry, "alice", "root", database=database)
    assert caught.value.field == "scope"
    with pytest.raises(InputError) as caught:
        create_key(registry, "../alice", "infer", database=database)
    assert caught.value.field == "owner"
    with pytest.raises(InputError) as caught:
        create_key(registry, "alice", "infer", rate_limit=0, database=database)
    assert caught.value.field == "rate_limit"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / ".keys.json").write_text(json.dumps({"schema_version": 1, "keys": [{"id": "x", "owner": "o"}]}))
    with pytest.raises(InputError) as caught:
        KeyStore(broken, database)
    assert caught.value.field == "keys[0]" and str(broken / ".keys.json") in str(caught.value)
    assert (broken / ".keys.json").exists()  # nothing imported, nothing renamed


def test_the_sqlite_database_is_owner_only(tmp_path):
    registry = tmp_path / "registry"
    create_key(registry, "alice", "infer")
    assert (registry / ".gateway.sqlite3").stat().st_mode & 0o077 == 0
