"""The typer application every command module attaches to. Faces are thin: parse, call the pipeline, render."""
from __future__ import annotations

import typer
from rich.console import Console
from typer.core import TyperGroup


class Group(TyperGroup):
    """A command group whose --help, when not given, is False rather than unset: typer coerces an unset value
    through pydantic, whose import (~0.2 s) would otherwise come with every `stateset-agents COMMAND --help`."""

    def get_help_option(self, ctx):
        option = super().get_help_option(ctx)
        if option is not None and option.default is None:
            option.default = False
        return option


app = typer.Typer(
    name="stateset-agents",
    help="RL improvement control plane for conversational agents: ingest logs, grade, curate, train, evaluate, deploy.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=Group,
)
plugins_app = typer.Typer(help="List the installed plugins and their components.", no_args_is_help=True, cls=Group)
plugin_app = typer.Typer(help="Serve one component over gRPC (started by the kernel, not by hand).",
                         no_args_is_help=True, cls=Group)
improve_app = typer.Typer(help="Grade transcripts with a reward and curate a training set.", no_args_is_help=True,
                          cls=Group)
app.add_typer(plugins_app, name="plugins")
app.add_typer(plugin_app, name="plugin")
app.add_typer(improve_app, name="improve")

console = Console()
err_console = Console(stderr=True)


def version_callback(value: bool):
    if value:
        from ..core._version import __version__

        typer.echo(f"stateset-agents {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=version_callback, is_eager=True,
                                 help="Print the version and exit."),
):
    """StateSet Agents."""
