"""Finding components: pluggy over the `stateset_agents` entry-point group.

Every plugin, first-party or not, is a module named by an entry point in that group. Loading a plugin calls its
`register_*` hooks with a `register` callback; what it registers is a `ComponentSpec`, which may name its class lazily
("module:attr") so that a component whose optional dependencies are missing is still listed, as unavailable, with
the command that installs them, and so that listing components (`plugins list`, a command's `--help`) imports no
component module. Plugins also register the command-line options their components take (`OptionSpec`) and the
container images that serve them (`ImageSpec`); faces read these, and capabilities, instead of lists of names.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

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
    #: "module:function" giving the variables a child process that runs the component starts with (function of
    #: the parent's environment, returning the ones to add): what must be set before the process starts, such
    #: as an allocator to preload. Imported only when the subprocess runtime launches the component.
    child_env: str | None = None

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

    def offers(self, capability: str) -> bool:
        if capability == "local" and self.kind == "trainer" and not {"local", "remote"} & set(self.capabilities):
            return True  # a trainer registered before placements were declared runs where it always ran: here
        return capability in self.capabilities

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
        cls = getattr(module, attr, None)
        if not isinstance(cls, type) or not issubclass(cls, BASE_CLASSES[self.kind]):
            raise StatesetError(f"plugin {self.plugin} registered {self.full_name} as {self.target}, which is not "
                                f"a stateset_agents.{BASE_CLASSES[self.kind].__name__} subclass")
        # A lazy registration repeats the class's name and version: they must agree, or lineage would record a
        # version the code does not have.
        for what, registered in (("name", self.name), ("version", self.version)):
            own = getattr(cls, what, "")
            if own and own != registered:
                raise StatesetError(f"plugin {self.plugin} registered {self.full_name} with {what} {registered!r}, "
                                    f"but {self.target} says {own!r}")
        return cls

    def as_row(self) -> dict[str, Any]:
        missing = self.missing
        return {
            "component": self.full_name, "kind": self.kind, "name": self.name, "version": self.version,
            "package": self.package, "plugin": self.plugin, "available": not missing,
            "missing": missing, "install": self.install if missing else None,
            "capabilities": list(self.capabilities),
        }


#: JSON Schema types an option may have (`path`: a string naming a file); what click parses each as is the face's.
OPTION_TYPES = {"string": {"type": "string"}, "path": {"type": "string"}, "integer": {"type": "integer"},
                "number": {"type": "number"}, "boolean": {"type": "boolean"}}


@dataclass(frozen=True)
class OptionSpec:
    """A command-line option a plugin adds to a command (`register_options`): its value is the config field
    `field` of the component that runs (for `train`, an objective field)."""

    command: str
    flag: str
    field: str
    type: str = "string"
    help: str = ""
    components: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def schema(self) -> dict[str, Any]:
        return {**OPTION_TYPES[self.type], **({"description": self.help} if self.help else {})}

    def applies_to(self, full_name: str) -> bool:
        return not self.components or full_name in self.components


@dataclass(frozen=True)
class ImageSpec:
    """A container image role (`register_images`): how `images build ROLE` builds it, and what it serves."""

    role: str
    dockerfile: str
    base: str
    kinds: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    offline: bool = True
    gpu_base: str | None = None
    stacks: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    help: str = ""
    plugin: str = ""

    def serves(self, row: Mapping[str, Any]) -> bool:
        """Whether the image holds a component (a `plugins list --json` row)."""
        return bool(row.get("available")) and (row["kind"] in self.kinds or row["component"] in self.components)


#: The kernel's one image role, generic: any plugin's CPU components, every dependency travelling as a wheel.
PLUGINS_IMAGE = ImageSpec(role="plugins", dockerfile="images/plugins/Dockerfile", base="python:3.12-slim",
                          kinds=("ingestor", "reward", "evaluator", "provider"), offline=True,
                          help="CPU: any plugin's ingestors, rewards, evaluators and providers", plugin="(kernel)")


@dataclass(frozen=True)
class ServingSpec:
    """A serving engine (`register_serving`): the factory `serve` loads, lazily, by "module:attr"."""

    name: str
    target: str
    requires: tuple[str, ...] = ()
    install: str | None = None
    help: str = ""
    plugin: str = ""

    @property
    def missing(self) -> list[str]:
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def load(self) -> Callable[[Mapping[str, Any]], Any]:
        if self.missing:
            raise ComponentUnavailable(f"serving:{self.name}", self.missing, self.install or "")
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class RecipeSpec:
    """An industry recipe (`register_recipes`): loaded, lazily, by "module:attr" (hookspec documents the object)."""

    name: str
    target: str
    version: str = "0.0.0"
    summary: str = ""
    plugin: str = ""
    package: str = ""

    def load(self) -> Any:
        module, _, attr = self.target.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise StatesetError(f"plugin {self.plugin}: recipe {self.name!r} names {self.target}, which does not "
                                f"load: {type(exc).__name__}: {exc}") from None


@dataclass
class Registry:
    components: dict[str, ComponentSpec] = field(default_factory=dict)
    plugins: dict[str, str] = field(default_factory=dict)  # plugin name -> package
    load_errors: dict[str, str] = field(default_factory=dict)
    options: list[OptionSpec] = field(default_factory=list)
    images: dict[str, ImageSpec] = field(default_factory=dict)
    serving: dict[str, ServingSpec] = field(default_factory=dict)
    recipes: dict[str, RecipeSpec] = field(default_factory=dict)

    def recipe(self, name: str) -> RecipeSpec:
        if name not in self.recipes:
            raise UnknownComponent(f"no recipe {name!r}; installed: {', '.join(sorted(self.recipes)) or 'none'}")
        return self.recipes[name]

    def serving_engine(self, name: str | None = None) -> ServingSpec:
        """The serving engine named, else the only one installed."""
        if name is not None:
            if name not in self.serving:
                raise UnknownComponent(f"no serving engine {name!r}; installed: {', '.join(self.serving) or 'none'}")
            return self.serving[name]
        if len(self.serving) != 1:
            raise UnknownComponent("no serving engine is installed (a plugin registers one with register_serving)"
                                   if not self.serving else
                                   f"several serving engines are installed ({', '.join(sorted(self.serving))}); "
                                   "name one with --engine")
        return next(iter(self.serving.values()))

    def all(self, kind: str | None = None) -> list[ComponentSpec]:
        specs = [s for s in self.components.values() if kind is None or s.kind == kind]
        return sorted(specs, key=lambda s: (KINDS.index(s.kind), s.name))

    def names(self, kind: str, capability: str | None = None) -> list[str]:
        """Bare names of the components of `kind` (that offer `capability`), sorted."""
        return [s.name for s in self.all(kind) if capability is None or s.offers(capability)]

    def offering(self, kind: str, capability: str) -> ComponentSpec:
        """The one component of `kind` that offers `capability` (e.g. the evaluator that compares base and
        adapter: `offering("evaluator", "paired")`)."""
        specs = [s for s in self.all(kind) if s.offers(capability)]
        if len(specs) == 1:
            return specs[0]
        if not specs:
            raise UnknownComponent(f"no installed {kind} offers {capability!r} (`stateset-agents plugins list` "
                                   "shows each component's capabilities)")
        raise UnknownComponent(f"several {kind}s offer {capability!r}: {', '.join(s.full_name for s in specs)}; "
                               f"limit the plugins that load with {PLUGINS_ENV}")

    def require(self, name: str, kind: str, capability: str, what: str) -> ComponentSpec:
        """`resolve(name, kind)`, refused unless the component offers `capability`; `what` says what needs it."""
        spec = self.resolve(name, kind)
        if not spec.offers(capability):
            able = ", ".join(self.names(kind, capability)) or "none installed"
            raise UnknownComponent(f"{spec.full_name} does not declare {capability!r}, which {what} needs; "
                                   f"those that do: {able}")
        return spec

    def default(self, kind: str, capability: str | None = None, *, face: str | None = None) -> str | None:
        """The component a face takes when none is named: among those offering `capability`, the one declaring
        ``default:FACE``, else the one declaring ``default``, else the only one installed; None when no single
        component is left (the face then asks for a name)."""
        specs = [s for s in self.all(kind) if capability is None or s.offers(capability)]
        for wanted in ([f"default:{face}"] if face else []) + ["default"]:
            chosen = [s for s in specs if s.offers(wanted)]
            if len(chosen) == 1:
                return chosen[0].name
        return specs[0].name if len(specs) == 1 else None

    def options_for(self, command: str) -> list[OptionSpec]:
        return [o for o in self.options if o.command == command]

    def image_roles(self) -> dict[str, ImageSpec]:
        """Every image role: the kernel's generic `plugins` role and those the plugins declare."""
        if PLUGINS_IMAGE.role in self.images:
            raise StatesetError(f"plugin {self.images[PLUGINS_IMAGE.role].plugin} declares the image role "
                                f"{PLUGINS_IMAGE.role!r}, which is the kernel's")
        return {PLUGINS_IMAGE.role: PLUGINS_IMAGE, **dict(sorted(self.images.items()))}

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
                 capabilities: Iterable[str] = (), child_env: str | None = None) -> None:
        if child_env is not None and (not isinstance(child_env, str) or ":" not in child_env):
            raise StatesetError(f"plugin {plugin}: child_env is a 'module:function' string, got {child_env!r}")
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
            requires=tuple(requires), install=install, capabilities=tuple(capabilities), child_env=child_env)

    return register


def _make_option_register(registry: Registry, plugin: str) -> Callable:
    def register(command: str, flag: str, *, field: str | None = None, type: str = "string", help: str = "",
                 components: Iterable[str] = ()) -> None:
        where = f"plugin {plugin}: option {flag!r}"
        if not isinstance(flag, str) or not flag.startswith("--") or len(flag) < 3:
            raise StatesetError(f"{where}: a flag is spelled --NAME")
        if type not in OPTION_TYPES:
            raise StatesetError(f"{where}: type {type!r} is not one of {', '.join(OPTION_TYPES)}")
        comps = tuple(components)
        for full in comps:
            if full.partition(":")[0] not in KINDS or not full.partition(":")[2]:
                raise StatesetError(f"{where}: components are named KIND:NAME, not {full!r}")
        name = field or flag[2:].replace("-", "_")
        for other in registry.options:
            if other.command == command and (other.flag == flag or other.field == name):
                raise StatesetError(f"{command} {flag} ({name}) is registered twice: by plugin {other.plugin} and by "
                                    f"plugin {plugin}")
        registry.options.append(OptionSpec(command=command, flag=flag, field=name, type=type, help=help,
                                           components=comps, plugin=plugin))

    return register


def _make_image_register(registry: Registry, plugin: str) -> Callable:
    def register(role: str, *, dockerfile: str, base: str, kinds: Iterable[str] = (), components: Iterable[str] = (),
                 offline: bool = True, gpu_base: str | None = None,
                 stacks: Mapping[str, Mapping[str, str]] | None = None, help: str = "") -> None:
        kinds = tuple(kinds)
        if not role or any(k not in KINDS for k in kinds):
            raise StatesetError(f"plugin {plugin}: image role {role!r} needs a name and kinds among {', '.join(KINDS)}")
        if role in registry.images:
            raise StatesetError(f"image role {role!r} is registered twice: by plugin {registry.images[role].plugin} "
                                f"and by plugin {plugin}")
        if gpu_base and "cuda" not in (stacks or {}):
            raise StatesetError(f"plugin {plugin}: image role {role!r} has a gpu_base but no 'cuda' stack")
        registry.images[role] = ImageSpec(role=role, dockerfile=dockerfile, base=base, kinds=kinds,
                                          components=tuple(components), offline=offline, gpu_base=gpu_base,
                                          stacks={k: dict(v) for k, v in (stacks or {}).items()}, help=help,
                                          plugin=plugin)

    return register


def _make_serving_register(registry: Registry, plugin: str) -> Callable:
    def register(name: str, *, target: str, requires: Iterable[str] = (), install: str | None = None,
                 help: str = "") -> None:
        if not name or not isinstance(target, str) or ":" not in target:
            raise StatesetError(f"plugin {plugin}: a serving engine needs a name and a 'module:attr' target")
        if name in registry.serving:
            raise StatesetError(f"serving engine {name!r} is registered twice: by plugin "
                                f"{registry.serving[name].plugin} and by plugin {plugin}")
        registry.serving[name] = ServingSpec(name=name, target=target, requires=tuple(requires), install=install,
                                             help=help, plugin=plugin)

    return register


def _make_recipe_register(registry: Registry, plugin: str, package: str) -> Callable:
    def register(target: str, *, name: str, version: str = "0.0.0", summary: str = "") -> None:
        if not name or not isinstance(target, str) or ":" not in target:
            raise StatesetError(f"plugin {plugin}: a recipe needs a name and a 'module:attr' target")
        if name in registry.recipes:
            raise StatesetError(f"recipe {name!r} is registered twice: by plugin {registry.recipes[name].plugin} "
                                f"and by plugin {plugin}")
        registry.recipes[name] = RecipeSpec(name=name, target=target, version=version, summary=summary,
                                            plugin=plugin, package=package)

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
    for impl in reversed(pm.hook.register_options.get_hookimpls()):
        impl.function(register=_make_option_register(registry, impl.plugin_name))
    for impl in reversed(pm.hook.register_images.get_hookimpls()):
        impl.function(register=_make_image_register(registry, impl.plugin_name))
    for impl in reversed(pm.hook.register_serving.get_hookimpls()):
        impl.function(register=_make_serving_register(registry, impl.plugin_name))
    for impl in reversed(pm.hook.register_recipes.get_hookimpls()):
        impl.function(register=_make_recipe_register(registry, impl.plugin_name,
                                                     packages.get(impl.plugin_name, "?")))
    registry.plugins.update(packages)
    return registry


_cached: Registry | None = None


def get_registry(refresh: bool = False) -> Registry:
    global _cached
    if _cached is None or refresh:
        _cached = discover()
    return _cached
