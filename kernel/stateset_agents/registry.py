"""Finding components: pluggy over the `stateset_agents` entry-point group.

Every plugin, first-party or not, is a module named by an entry point in that group. Loading a plugin calls its
`register_*` hooks with a `register` callback; what it registers is a `ComponentSpec`, which may name its class lazily
("module:attr") so that a component whose optional dependencies are missing is still listed, as unavailable, with
the command that installs them.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import pluggy

from . import hookspec
from .components import BASE_CLASSES, KINDS, Component
from .errors import ComponentUnavailable, StatesetError, UnknownComponent

ENTRY_POINT_GROUP = "stateset_agents"
#: Comma list of entry-point names: only these plugins load.
PLUGINS_ENV = "STATESET_AGENTS_PLUGINS"
#: Comma list of extra plugin modules to load (for development and tests; not needed for installed plugins).
PLUGIN_MODULES_ENV = "STATESET_AGENTS_PLUGIN_MODULES"


@dataclass
class ComponentSpec:
    kind: str
    name: str
    version: str
    target: Any  # the class, or "module:attr"
    plugin: str  # entry-point (or module) name that registered it
    package: str  # distribution that ships it
    requires: tuple[str, ...] = ()
    install: str | None = None
    capabilities: tuple[str, ...] = ()

    @property
    def full_name(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def missing(self) -> list[str]:
        """Required top-level modules that cannot be found (checked without importing them)."""
        out = []
        for mod in self.requires:
            try:
                if importlib.util.find_spec(mod) is None:
                    out.append(mod)
            except (ImportError, ValueError):
                out.append(mod)
        return out

    @property
    def available(self) -> bool:
        return not self.missing

    def load_class(self) -> type[Component]:
        missing = self.missing
        if missing:
            raise ComponentUnavailable(self.full_name, missing, self.install or f"pip install {' '.join(missing)}")
        if not isinstance(self.target, str):
            return self.target
        module_name, _, attr = self.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ComponentUnavailable(self.full_name, [exc.name or module_name],
                                       self.install or f"pip install {exc.name or module_name}") from None
        return getattr(module, attr)

    def as_row(self) -> dict[str, Any]:
        missing = self.missing
        return {
            "component": self.full_name, "kind": self.kind, "name": self.name, "version": self.version,
            "package": self.package, "plugin": self.plugin, "available": not missing,
            "missing": missing, "install": self.install if missing else None,
            "capabilities": list(self.capabilities),
        }


@dataclass
class Registry:
    components: dict[str, ComponentSpec] = field(default_factory=dict)
    plugins: dict[str, str] = field(default_factory=dict)  # plugin name -> package
    load_errors: dict[str, str] = field(default_factory=dict)

    def all(self, kind: str | None = None) -> list[ComponentSpec]:
        specs = [s for s in self.components.values() if kind is None or s.kind == kind]
        return sorted(specs, key=lambda s: (KINDS.index(s.kind), s.name))

    def resolve(self, name: str, kind: str | None = None) -> ComponentSpec:
        """Accept `KIND:NAME`, or a bare `NAME` where it is unique (within `kind` when given)."""
        if ":" in name:
            want_kind, _, bare = name.partition(":")
            if want_kind not in KINDS:
                raise UnknownComponent(f"unknown kind {want_kind!r} in {name!r}; kinds are {', '.join(KINDS)}")
            if kind and want_kind != kind:
                raise UnknownComponent(f"{name!r} is a {want_kind}, but a {kind} is needed here")
            kind = want_kind
        else:
            bare = name
        matches = [s for s in self.all(kind) if s.name == bare]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            known = ", ".join(s.full_name if kind is None else s.name for s in self.all(kind)) or "none installed"
            what = f"{kind} " if kind else "component "
            raise UnknownComponent(f"unknown {what}{bare!r}; known: {known}")
        raise UnknownComponent(
            f"{bare!r} is ambiguous: {', '.join(s.full_name for s in matches)}; name it as KIND:NAME")


def _make_register(registry: Registry, kind: str, plugin: str, package: str) -> Callable:
    base = BASE_CLASSES[kind]

    def register(target: Any, *, name: str | None = None, version: str | None = None,
                 requires: Iterable[str] = (), install: str | None = None,
                 capabilities: Iterable[str] = ()) -> None:
        if isinstance(target, type):
            if not issubclass(target, base):
                raise StatesetError(f"plugin {plugin} registered {target.__name__} as a {kind}, "
                                    f"but it does not subclass stateset_agents.{base.__name__}")
            name = name or target.name
            version = version or target.version
            capabilities = tuple(capabilities) or tuple(target.capabilities)
        elif not isinstance(target, str) or ":" not in target:
            raise StatesetError(f"plugin {plugin}: register() takes a class or a 'module:attr' string")
        if not name:
            raise StatesetError(f"plugin {plugin} registered a {kind} without a name")
        full = f"{kind}:{name}"
        if full in registry.components:
            other = registry.components[full].plugin
            raise StatesetError(f"{full} is registered twice: by plugin {other} and by plugin {plugin}")
        registry.components[full] = ComponentSpec(
            kind=kind, name=name, version=version or "0.0.0", target=target, plugin=plugin, package=package,
            requires=tuple(requires), install=install, capabilities=tuple(capabilities))

    return register


def _split_env(var: str) -> list[str] | None:
    raw = os.environ.get(var)
    if raw is None:
        return None
    return [p.strip() for p in raw.split(",") if p.strip()]


def discover() -> Registry:
    """Load every plugin allowed by the environment and collect what each registers."""
    from importlib.metadata import entry_points

    pm = pluggy.PluginManager(hookspec.PROJECT)
    pm.add_hookspecs(hookspec)
    registry = Registry()
    allowed = _split_env(PLUGINS_ENV)
    plugin_names: list[tuple[str, str]] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if allowed is not None and ep.name not in allowed:
            continue
        package = ep.dist.name if ep.dist else "?"
        try:
            module = ep.load()
        except Exception as exc:  # a broken third-party plugin must not take the kernel down
            registry.load_errors[ep.name] = f"{type(exc).__name__}: {exc}"
            continue
        pm.register(module, name=ep.name)
        plugin_names.append((ep.name, package))
    for mod_name in _split_env(PLUGIN_MODULES_ENV) or []:
        try:
            module = importlib.import_module(mod_name)
        except Exception as exc:
            registry.load_errors[mod_name] = f"{type(exc).__name__}: {exc}"
            continue
        if pm.is_registered(module):
            continue
        pm.register(module, name=mod_name)
        plugin_names.append((mod_name, "(module)"))

    packages = dict(plugin_names)
    for kind, hook_name in hookspec.HOOK_FOR_KIND.items():
        # pluggy has validated each implementation against the hookspec; we call them one by one (in
        # registration order) so every component knows which plugin registered it.
        for impl in reversed(getattr(pm.hook, hook_name).get_hookimpls()):
            package = packages.get(impl.plugin_name, "?")
            impl.function(register=_make_register(registry, kind, impl.plugin_name, package))
    registry.plugins.update(packages)
    return registry


_cached: Registry | None = None


def get_registry(refresh: bool = False) -> Registry:
    global _cached
    if _cached is None or refresh:
        _cached = discover()
    return _cached
