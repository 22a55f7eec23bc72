"""What a command offers, from the registry: its choices (by capability), its defaults, and the options plugins add.

A command built with `registry_command(...)` reads the registry the first time it parses arguments or formats its
help, never at import: `stateset-agents --help` loads no plugin, and `train --help` loads only the plugins'
registrations (lazy specs), no component module. Plugin options (`register_options`) appear in the command's help
under a panel naming the components that take them; their values reach the command through `plugin_fields()`.
"""
from __future__ import annotations

from contextvars import ContextVar
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from typer.core import TyperCommand

#: The running command's plugin option values, (OptionSpec, value) pairs: typer calls a command's function with
#: the function's own parameters only, so these wait here for its body.
_VALUES: ContextVar[list[tuple[Any, Any]]] = ContextVar("stateset_agents_plugin_options", default=[])
_PY_TYPES = {"string": str, "path": Path, "integer": int, "number": float, "boolean": bool}


def _registry():
    from ..core.registry import get_registry

    return get_registry()


def _plugin_params(specs) -> dict[str, tuple[Any, Any]]:
    """typer's own parameters for the plugins' options (so its help renders them like the command's), made the
    public way: a stand-in function whose signature declares them. Name -> (OptionSpec, parameter)."""
    import inspect

    import typer
    from typer.main import get_command

    names = {f"plugin_option_{spec.field}": spec for spec in specs}
    signature = []
    for name, spec in names.items():
        flag = f"{spec.flag}/--no-{spec.flag[2:]}" if spec.type == "boolean" else spec.flag
        panel = f"Options of {', '.join(spec.components)}" if spec.components else "Plugin options"
        signature.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                           default=typer.Option(None, flag, help=spec.help, rich_help_panel=panel),
                                           annotation=Optional[_PY_TYPES[spec.type]]))

    def stand_in(**_values):
        """Plugin options."""

    stand_in.__signature__ = inspect.Signature(signature)
    stand_in.__annotations__ = {p.name: p.annotation for p in signature}
    holder = typer.Typer(add_completion=False)
    holder.command()(stand_in)
    return {p.name: (names[p.name], p) for p in get_command(holder).params if p.name in names}


def registry_command(command: str | None = None, *,
                     help: Mapping[str, Callable[[Any], str]] | None = None) -> type[TyperCommand]:
    """A typer command class: `command` names the plugin options it takes (`register_options(register)` with
    `register(command, ...)`); `help` maps a parameter's name to a function of the registry that writes its help."""
    helps = dict(help or {})

    class RegistryCommand(TyperCommand):
        _plugin: dict[str, tuple[Any, Any]] | None = None  # parameter name -> (OptionSpec, typer parameter)

        def get_params(self, ctx):
            if self._plugin is None:
                self._plugin = {}
                self._read_registry()
            return super().get_params(ctx)

        def _read_registry(self) -> None:
            from ..core.errors import StatesetError

            registry = _registry()
            for param in self.params:
                if param.name in helps:
                    param.help = helps[param.name](registry)
            specs = registry.options_for(command) if command else []
            own = {flag for p in self.params for flag in (*p.opts, *p.secondary_opts)}
            for spec in specs:
                if spec.flag in own:
                    raise StatesetError(f"plugin {spec.plugin} adds {spec.flag} to `{command}`, which has that "
                                        "option already")
            if specs:
                self._plugin = _plugin_params(specs)
                self.params.extend(param for _, param in self._plugin.values())

        def invoke(self, ctx):
            values = []
            for name, (spec, _) in (self._plugin or {}).items():
                value = ctx.params.pop(name, None)
                values.append((spec, str(value) if isinstance(value, Path) else value))
            token = _VALUES.set(values)
            try:
                return super().invoke(ctx)
            finally:
                _VALUES.reset(token)

    return RegistryCommand


def plugin_fields(component: str, what: str) -> dict[str, Any]:
    """The plugin options given to the running command, as config fields of `component` (KIND:NAME); an option
    that component does not take is refused, naming those that do. `what` is how the error names the component."""
    from ..core.errors import InputError

    fields: dict[str, Any] = {}
    for spec, value in _VALUES.get():
        if value is None:
            continue
        if not spec.applies_to(component):
            raise InputError(f"{what} does not use {spec.field!r} ({spec.flag} is an option of "
                             f"{', '.join(spec.components)})", field=spec.field)
        fields[spec.field] = value
    return fields


def one_of(kind: str, capability: str | None = None, *, face: str | None = None,
           lead: str = "One of") -> Callable[[Any], str]:
    """Help that lists the components of `kind` offering `capability`, marking the one `face` takes by default."""
    def text(registry) -> str:
        default = registry.default(kind, capability, face=face) if face else None
        names = [f"{n} (default)" if n == default else n for n in registry.names(kind, capability)]
        return f"{lead}: {', '.join(names) or 'none installed'}."

    return text
