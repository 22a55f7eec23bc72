"""Hypothesis strategies for MCP tool arguments, built from the input schema a tool lists (the subset of JSON
schema the tools use: object, string with enum/minLength, path strings, integer/number with bounds, boolean, arrays
of paths, free objects). `arguments(tool, root, outside)` draws either a schema-valid call or one mutated to be
invalid (a wrong type, a missing required field, an extra field, a huge string, a path that escapes the roots);
each draw says which fields it broke, so a test can check that the error names one of them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

#: Relative names a fuzzed path may take: files the fixture root holds, folders, names that do not exist.
PATH_NAMES = ["logs.jsonl", "validation.jsonl", "missing.jsonl", ".", "sub", "sub/x.jsonl", "ingested", "runs/r"]
#: Strings with a bit of everything: unicode, controls, the NUL byte, separators.
ODD = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24)
JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False,
                        allow_infinity=False, width=32), ODD)
HUGE = 300_000  # characters: over the server's argument cap, under what the transports carry


def is_path(schema: dict[str, Any]) -> bool:
    return "inside the server's roots" in schema.get("description", "")


def escapes(outside: str) -> list[str]:
    """Paths that leave the roots: `..`, absolute, a symlink out (the fixture's `escape` link), home."""
    return ["../outside/secret.jsonl", outside, outside + "/secret.jsonl", "/etc/hosts", "escape/secret.jsonl",
            "sub/../../outside", "~/.ssh/id_rsa", "~nosuchuser/x", "./" + "../" * 8 + "etc/passwd"]


def path_value() -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(PATH_NAMES),
                     st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00~."),
                             min_size=1, max_size=16))


def valid(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value the schema accepts."""
    kind = schema.get("type")
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if kind == "string":
        if is_path(schema):
            return path_value()
        return st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=schema.get("minLength", 0),
                       max_size=24)
    if kind == "integer":
        low = schema.get("minimum", -5)
        return st.integers(low, low + 40)
    if kind == "number":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -5.0))
        high = schema.get("maximum", schema.get("exclusiveMaximum", low + 100.0))
        return st.floats(low, high, allow_nan=False, exclude_min="exclusiveMinimum" in schema,
                         exclude_max="exclusiveMaximum" in schema)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(valid(schema.get("items", {"type": "string"})) if not is_path(schema) else path_value(),
                        min_size=schema.get("minItems", 0), max_size=3)
    if kind == "object":
        return st.dictionaries(st.text(max_size=8), JSON_SCALAR, max_size=3)
    return JSON_SCALAR


def wrong_type(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A value of another JSON type than the schema's (an integral float is an integer to JSON schema)."""
    kind = schema.get("type")
    options = {"string": st.text(max_size=8), "integer": st.integers(), "boolean": st.booleans(),
               "array": st.lists(st.integers(), max_size=2), "object": st.dictionaries(st.text(max_size=4),
                                                                                      st.integers(), max_size=2),
               "null": st.none(), "fraction": st.sampled_from([0.5, -1.25, 3.75])}
    same = {"string": {"string"}, "integer": {"integer"}, "number": {"integer", "fraction"},
            "boolean": {"boolean"}, "array": {"array"}, "object": {"object"}}.get(kind, set())
    names = [n for n in options if n not in same]
    return st.sampled_from(names).flatmap(lambda n: options[n])


@dataclass
class Draw:
    args: dict[str, Any]
    broken: set[str] = field(default_factory=set)  # fields the schema must refuse
    escaped: set[str] = field(default_factory=set)  # path fields given a path outside the roots
    how: str = "valid"


@st.composite
def arguments(draw, tool, outside: str, *, allow_valid: bool = True) -> Draw:
    """One call's arguments for `tool` (an `mcp_types.Tool`): valid or mutated; `allow_valid=False` (tools that
    would start real work) draws only calls the schema or the roots refuse before any work."""
    schema = tool.input_schema
    props: dict[str, Any] = schema.get("properties", {})
    required = list(schema.get("required", []))
    optional = draw(st.lists(st.sampled_from(sorted(props)), unique=True, max_size=3)) if props else []
    args = {name: draw(valid(props[name]), label=name) for name in dict.fromkeys(required + optional)}
    paths = [n for n, s in props.items() if is_path(s)]
    strings = [n for n, s in props.items() if s.get("type") == "string" and "enum" not in s]
    hows = (["valid"] if allow_valid else []) + ["wrong_type", "extra"] + (["missing"] if required else []) \
        + (["escape"] if paths else []) + (["huge"] if strings else [])
    if not props and not allow_valid:
        hows = ["extra"]
    how = draw(st.sampled_from(hows), label="mutation")
    out = Draw(args, how=how)
    if how == "wrong_type":
        name = draw(st.sampled_from(sorted(props)) if props else st.nothing())
        args[name] = draw(wrong_type(props[name]))
        out.broken.add(name)
    elif how == "extra":
        name = draw(st.text(min_size=1, max_size=12).filter(lambda n: n not in props))
        args[name] = draw(JSON_SCALAR)
        out.broken.add(name)
    elif how == "missing":
        name = draw(st.sampled_from(required))
        args.pop(name, None)
        out.broken.add(name)
    elif how == "escape":
        name = draw(st.sampled_from(paths))
        value = draw(st.sampled_from(escapes(outside)))
        args[name] = [value] if props[name].get("type") == "array" else value
        out.escaped.add(name)
    elif how == "huge":
        name = draw(st.sampled_from(strings))
        args[name] = draw(st.sampled_from("a/é\x00")) * HUGE
        out.broken.add(name)
    return out
