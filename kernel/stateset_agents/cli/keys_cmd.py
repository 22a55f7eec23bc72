"""`stateset-agents keys`: API keys for `serve`, stored hashed in the gateway's state database (`gateway.keys`)."""
from __future__ import annotations

from typing import Optional

import typer

from .app import Group, app, console

keys_app = typer.Typer(help="API keys for `serve` (stored hashed in the gateway's database).", no_args_is_help=True,
                       cls=Group)
app.add_typer(keys_app, name="keys")

_DATABASE_HELP = ("The state database `serve --database` uses: sqlite:///PATH or postgresql://... (default: "
                  "REGISTRY/.gateway.sqlite3).")


@keys_app.command("create")
def create(
    registry: str = typer.Option(..., "--registry", help="The deploy registry `serve` runs over."),
    owner: str = typer.Option(..., "--owner", help="Who the key belongs to (its captures are theirs)."),
    scope: str = typer.Option("infer", "--scope", help="infer (inference, agents, own conversations), train (also "
                                                      "training jobs) or admin (everything, every owner's)."),
    rate_limit: Optional[int] = typer.Option(None, "--rate-limit", help="Requests a minute (default: the server's)."),
    database: Optional[str] = typer.Option(None, "--database", help=_DATABASE_HELP),
):
    """Create a key and print it once: it is not stored, only its hash."""
    from ..gateway.keys import create_key

    key, record = create_key(registry, owner, scope, rate_limit, database)
    console.print(key, highlight=False, soft_wrap=True)
    console.print(f"[dim]key {record['id']} for {owner} ({scope}); it is shown only now[/]", highlight=False)


@keys_app.command("list")
def list_(registry: str = typer.Option(..., "--registry", help="The deploy registry."),
          database: Optional[str] = typer.Option(None, "--database", help=_DATABASE_HELP)):
    """The keys (ids, owners, scopes, rate limits, created; revoked ones say when; never the keys)."""
    from ..gateway.keys import list_keys

    for r in list_keys(registry, database):
        revoked = f"  revoked {r['revoked_at']}" if r["revoked_at"] else ""
        console.print(f"{r['id']}  {r['owner']}  {r['scope']}  {r.get('rate_limit') or '-'}  {r['created_at']}"
                      f"{revoked}", highlight=False, soft_wrap=True)


@keys_app.command("revoke")
def revoke(registry: str = typer.Option(..., "--registry", help="The deploy registry."),
           key_id: str = typer.Argument(..., help="The key's id (as `keys list` shows it)."),
           database: Optional[str] = typer.Option(None, "--database", help=_DATABASE_HELP)):
    """Revoke a key (a running server refuses it from its next request)."""
    from ..gateway.keys import revoke_key

    if not revoke_key(registry, key_id, database):
        console.print(f"no live key {key_id}")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}")
