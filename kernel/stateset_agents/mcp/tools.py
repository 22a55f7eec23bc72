"""What an MCP tool is here: a name, a JSON schema for its input and one for its structured result, and the function
that calls the pipeline (the same function the CLI command calls). The tool modules (`tools_*.py`) declare them;
the server validates arguments against the input schema, runs the function in a worker thread, and checks the
result against the output schema before it goes out (a result that breaks its own schema is an error, never sent)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .roots import Roots

TRAIN_INSTALL = "pip install 'stateset-agents[train]'"
#: Size limits of one argument: a string (a path is at most PATH_MAX bytes anyway) and a list of paths.
MAX_STRING = 4096
MAX_ITEMS = 64


@dataclass
class Call:
    """One tool call as the tool function sees it."""

    args: dict[str, Any]
    roots: Roots
    allow_spend: bool = False
    progress: Callable[[float, float | None, str | None], None] = lambda done, total, message: None
    cancelled: threading.Event = field(default_factory=threading.Event)
    #: every path argument as resolved, by field: an error about a file names the argument that led to it
    resolved: dict[str, Path] = field(default_factory=dict)

    def path(self, name: str) -> Path | None:
        """Argument `name` as a path inside the roots (None when not given)."""
        value = self.args.get(name)
        if value is None:
            return None
        self.resolved[name] = self.roots.path(value, name)
        return self.resolved[name]

    def paths(self, name: str) -> list[Path]:
        out = [self.roots.path(v, f"{name}[{i}]") for i, v in enumerate(self.args.get(name) or [])]
        self.resolved.update({f"{name}[{i}]": p for i, p in enumerate(out)})
        return out

    def field_of(self, path: str | None) -> str | None:
        """The argument whose path is `path` or holds it (the deepest such), None when none does."""
        if not path:
            return None
        try:
            target = Path(path).resolve()
        except (OSError, ValueError):
            return None
        holders = [(len(p.parts), name) for name, p in self.resolved.items() if target == p or p in target.parents]
        return max(holders)[1] if holders else None

    def get(self, name: str, default: Any = None) -> Any:
        value = self.args.get(name)
        return default if value is None else value


@dataclass
class Tool:
    name: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    output: dict[str, Any]  # JSON schema of the structured result (an object)
    run: Callable[[Call], dict[str, Any]]
    summary: Callable[[dict[str, Any]], str] = lambda result: "done"
    #: a function of the registry: None when the tool can run here, else why not (with the install command)
    unavailable: Callable[[Any], str | None] = lambda registry: None
    spends: bool = False

    @property
    def input_schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": self.properties, "required": list(self.required),
                "additionalProperties": False}

    @property
    def output_schema(self) -> dict[str, Any]:
        return {"type": "object", **self.output}


# -- schema pieces -------------------------------------------------------------------------------------------------

def string(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, "maxLength": MAX_STRING, **more}


def path(description: str) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": MAX_STRING,
            "description": description + " (a path inside the server's roots)"}


def paths(description: str) -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": MAX_STRING}, "minItems": 1,
            "maxItems": MAX_ITEMS, "description": description + " (paths inside the server's roots)"}


def integer(description: str, minimum: int | None = None, **more: Any) -> dict[str, Any]:
    out = {"type": "integer", "description": description, **more}
    if minimum is not None:
        out["minimum"] = minimum
    return out


def number(description: str, **more: Any) -> dict[str, Any]:
    return {"type": "number", "description": description, **more}


def boolean(description: str) -> dict[str, Any]:
    return {"type": "boolean", "description": description}


def obj(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    """An output schema: these properties required, any others allowed (pipeline records grow additively)."""
    return {"type": "object", "required": list(required), "properties": properties}


ANY_OBJECT = {"type": "object"}
ANY_LIST = {"type": "array"}
NUMBER_OR_NULL = {"type": ["number", "null"]}
STRING_OR_NULL = {"type": ["string", "null"]}

REWARD_ARGS = {
    "reward": string("Reward component: NAME or reward:NAME (`plugins_list` with kind reward lists them)."),
    "policy": path("Policy file (YAML/JSON), given to the reward as config.policy"),
    "reward_config": path("Reward config file (YAML/JSON: the reward, its config and the weights `improve_calibrate` "
                          "fitted); its reward is the default for `reward`"),
}


def reward_of(call: Call, *, required: bool = True) -> tuple[str | None, dict[str, Any]]:
    """`reward`, `policy` and `reward_config` together, as the CLI reads --reward, --policy, --reward-config."""
    from ..cli.options import reward_and_config

    return reward_and_config(call.get("reward"), call.path("policy"), call.path("reward_config"), required=required)


def needs_component(kind: str, capability: str, face: str | None = None) -> Callable[[Any], str | None]:
    """Unavailable when the component the tool runs (of `kind` offering `capability`: the face's default where it
    has one, else any) is missing its optional dependencies, as `plugins list` reports them."""
    def check(registry) -> str | None:
        specs = [s for s in registry.all(kind) if s.offers(capability)]
        default = registry.default(kind, capability, face=face) if face else None
        if default is not None:
            specs = [registry.resolve(default, kind)]
        if not specs:
            return f"no installed {kind} offers {capability!r}"
        if any(s.available for s in specs):
            return None
        spec = specs[0]
        return f"{spec.full_name} needs {', '.join(spec.missing)}: install it with {spec.install or TRAIN_INSTALL}"

    return check
