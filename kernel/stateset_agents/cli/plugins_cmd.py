"""`plugins list`, `plugins check` and `plugin serve`."""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from .app import console, err_console, plugin_app, plugins_app


@plugins_app.command("list")
def plugins_list(
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
    kind: str = typer.Option(None, "--kind", help="Only this kind (ingestor, reward, trainer, evaluator, provider)."),
):
    """List every component: kind, name, version, package, whether it is available (or why not), and which
    built image (role) serves it in the container runtime."""
    from ..core.registry import get_registry
    from ..core.runtimes.container import image_for

    registry = get_registry()
    rows = []
    for spec in registry.all(kind):
        found = image_for(spec)  # the records `images build` wrote; no Docker daemon is asked
        rows.append({**spec.as_row(), "image": found[1].get("tag") if found else None})
    if as_json:
        import orjson

        payload = {"components": rows, "plugin_load_errors": registry.load_errors}
        sys.stdout.write(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    from rich.table import Table

    table = Table(title="StateSet Agents components")
    table.add_column("component", no_wrap=True)
    table.add_column("version", no_wrap=True)
    table.add_column("package")
    table.add_column("status", overflow="fold")
    table.add_column("image", overflow="fold")
    for r in rows:
        status = "[green]available[/]" if r["available"] else f"[yellow]unavailable[/]: {r['install']}"
        table.add_row(r["component"], r["version"], r["package"], status, r["image"] or "-")
    console.print(table)
    for plugin, error in registry.load_errors.items():
        console.print(f"[red]plugin {plugin} failed to load:[/] {error}")


def _component_config(path):
    """A component configuration file: a YAML or JSON mapping."""
    from ..core.jsonio import load_mapping

    return load_mapping(path, what="a component's config")


@plugins_app.command("check")
def plugins_check(
    component: str = typer.Argument(..., help="KIND:NAME (or a unique NAME) of an installed component."),
    runtime: list[str] = typer.Option(None, "--runtime", help="inprocess, subprocess or container (repeatable); "
                                                              "default: every runtime available here."),
    config_file: Path = typer.Option(None, "--config", help="The component's config (YAML/JSON); default: its "
                                                            "example_config()."),
    as_json: bool = typer.Option(False, "--json", help="Print machine-readable JSON."),
):
    """Run the conformance suite against one installed component in each runtime, and print what fails. Exit
    status 1 when anything fails. It never spends money: providers are only asked for quotes and about runs that
    do not exist."""
    from ..core.conformance import check_component, checks_for
    from ..core.registry import get_registry

    spec = get_registry().resolve(component)
    config = _component_config(config_file) if config_file else None
    results = check_component(spec, runtime or None, config=config)
    failed = [r for r in results if not r.passed]
    if as_json:
        import orjson

        sys.stdout.write(orjson.dumps({"component": spec.full_name, "passed": not failed,
                                       "results": [r.as_dict() for r in results]},
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
        raise typer.Exit(1 if failed else 0)
    docs = {c.name: c.doc for c in checks_for(spec.kind)}
    for r in results:
        mark = "[green]pass[/]" if r.passed else "[red]FAIL[/]"
        console.print(f"{mark} {r.runtime:<10} {r.check:<24} {r.detail or docs.get(r.check, '')}", highlight=False,
                      soft_wrap=True)
    runtimes = ", ".join(dict.fromkeys(r.runtime for r in results))
    if failed:
        err_console.print(f"[red]{spec.full_name}: {len(failed)} of {len(results)} checks failed[/] ({runtimes})",
                          highlight=False)
        raise typer.Exit(1)
    console.print(f"{spec.full_name}: all {len(results)} checks passed ({runtimes})", highlight=False)


@plugin_app.command("serve")
def plugin_serve(
    component: str = typer.Argument(..., help="KIND:NAME (or a unique NAME) of the component to serve."),
    transport: str = typer.Option("unix", help="unix (a 0600 socket in a private directory) or tcp."),
    host: str = typer.Option("127.0.0.1", help="TCP host to bind (tcp transport)."),
    port: int = typer.Option(0, help="TCP port to bind; 0 picks a free one (tcp transport)."),
    socket_dir: str = typer.Option(None, help="Directory for the unix socket (e.g. one mounted from the host)."),
    watch_stdin: bool = typer.Option(True, help="Exit when stdin closes (the launcher died)."),
):
    """Serve one component over gRPC. The kernel starts this; it is not meant to be run by hand."""
    from ..core.registry import get_registry
    from ..core.runtimes.server import launched_by_kernel, serve

    if not launched_by_kernel():
        raise typer.Exit(2)
    spec = get_registry().resolve(component)

    raise typer.Exit(serve(spec, transport=transport, host=host, port=port, socket_dir=socket_dir,
                           watch_stdin=watch_stdin))
