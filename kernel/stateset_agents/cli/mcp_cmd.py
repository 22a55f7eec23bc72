"""`stateset-agents mcp`: the MCP server (stdio, or streamable HTTP with a bearer key). The work is `mcp.server`;
the SDK loads inside the command body, so `--help` stays fast."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .app import app, err_console


@app.command()
def mcp(
    root: List[Path] = typer.Option([], "--root", help="A folder the tools may read and write (repeatable; default: "
                                                       "the working directory). Paths outside are refused."),
    http: bool = typer.Option(False, "--http", help="Serve streamable HTTP on --host/--port instead of stdio."),
    host: str = typer.Option("127.0.0.1", "--host", help="With --http: the address to bind (loopback by default)."),
    port: int = typer.Option(8765, "--port", help="With --http: the port."),
    registry: Optional[str] = typer.Option(None, "--registry", help="With --http: the deploy registry whose "
                                                                    "state database holds the API keys (admin "
                                                                    "scope; `keys create`)."),
    allow_origin: List[str] = typer.Option([], "--allow-origin", help="With --http: a browser Origin to accept "
                                                                      "besides loopback ones (repeatable)."),
    allow_spend: bool = typer.Option(False, "--allow-spend", help="SPENDS MONEY: offer train_remote_launch (it "
                                                                  "still requires max_cost_usd and the cap)."),
):
    """Serve the improve loop to Claude Code or any MCP client: `claude mcp add stateset -- stateset-agents mcp`."""
    from ..core.errors import InputError

    try:
        import mcp as _sdk  # noqa: F401
    except ModuleNotFoundError:
        raise InputError("the MCP server needs the mcp SDK: pip install 'stateset-agents[mcp]'") from None
    from ..mcp.roots import Roots
    from ..mcp.server import Options

    options = Options(roots=Roots(root), allow_spend=allow_spend)
    if not http:
        import anyio

        from ..mcp.server import serve_stdio

        anyio.run(serve_stdio, options)
        return
    from ..mcp import http as transport

    if registry is None:
        raise InputError("--http needs --registry REGISTRY: its state database holds the bearer keys callers must send",
                         field="registry")
    where = "loopback only" if transport.is_loopback(host) else "NOT loopback: reachable from the network"
    err_console.print(f"MCP over streamable HTTP on http://{host}:{port}/mcp ({where}); roots: "
                      f"{', '.join(str(r) for r in options.roots.folders)}", highlight=False)
    transport.serve(options, registry, host, port, allow_origin)
