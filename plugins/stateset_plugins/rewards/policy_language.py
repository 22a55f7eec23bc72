"""The NSR policy language: a policy file (YAML or JSON) parsed into rules, and a small safe expression evaluator.

Expressions are Python-looking conditions (`reservation.cabin == 'business' or within_24h`) parsed with `ast` and
evaluated over a whitelist only: names, attribute and index access into facts, literals, comparisons, `and/or/not`,
arithmetic and the functions in `FUNCTIONS` plus the reward's context functions. No attribute of a Python object is
ever reachable, nothing is imported or executed. Missing facts evaluate to UNKNOWN (three-valued logic), so a rule
can say what an unknown outcome means (`if_unknown`). The full language is in docs/policy-language.md; the policy
file is loaded by `policy_loading`.
"""
from __future__ import annotations

import ast
import operator
import re
from collections.abc import Mapping  # not typing's: its isinstance checks are several times slower
from datetime import datetime
from typing import Any, Callable

from stateset_agents.core.errors import InputError

from ._tools import tool_verb


class _Unknown:
    """A fact that the conversation has not established (no lookup made, field absent)."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __bool__(self) -> bool:  # guard: an UNKNOWN must never silently act as False
        raise TypeError("UNKNOWN has no truth value")


UNKNOWN = _Unknown()

DECISION_KINDS = ("write", "handoff", "refusal", "tool_call", "turn", "reply")
#: How a turn's verdicts make its score (docs/policy-language.md, "Score and reason").
SCORINGS = ("kept_share", "all_kept", "per_breach")


def _known(*values: Any) -> bool:
    return all(v is not UNKNOWN and v is not None for v in values)


def _strict(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a function so any unknown argument makes the result unknown."""
    def wrapped(*args: Any) -> Any:
        for value in args:  # a loop, not `_known`: these wrap every helper call of every rule
            if value is UNKNOWN or value is None:
                return UNKNOWN
        return fn(*args)
    return wrapped


def _pluck(items: Any, *keys: str) -> list[Any]:
    """Field(s) of each mapping in a list: pluck(flights, 'flight_number', 'date') -> [[number, date], ...]."""
    if not isinstance(items, list):
        return []
    out = []
    for item in items:
        if isinstance(item, Mapping):
            out.append(item.get(keys[0]) if len(keys) == 1 else [item.get(k) for k in keys])
    return out


def _count_prefix(values: Any, prefix: str) -> int:
    return sum(1 for v in values or () if isinstance(v, str) and v.startswith(prefix))


def _hours_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds() / 3600


def _as_set(values: Any) -> frozenset:
    return frozenset(tuple(v) if isinstance(v, list) else v for v in values or ())


def _same(have: Any, wanted: Any) -> bool:
    """Field equality as lookups use it: strings compare case-insensitively and trimmed, the rest exactly."""
    if isinstance(have, str) and isinstance(wanted, str):
        return have.strip().casefold() == wanted.strip().casefold()
    return have == wanted


def matches(item: Any, match: Mapping[str, Any]) -> bool:
    """Does a mapping carry every `field=value` of `match`? An UNKNOWN wanted value never matches."""
    if type(item) is not dict and not isinstance(item, Mapping):  # `type` first: abc checks are slow
        return False
    return all(wanted is not UNKNOWN and _same(item.get(key), wanted) for key, wanted in match.items())


def _where(items: Any, **match: Any) -> Any:
    """The mappings of a list whose fields equal the given values (strings case-insensitive)."""
    if items is UNKNOWN:
        return UNKNOWN
    return [item for item in items or () if matches(item, match)] if isinstance(items, list) else []


def _find(items: Any, **match: Any) -> Any:
    """The first mapping of a list whose fields equal the given values; UNKNOWN when none does."""
    if isinstance(items, list):
        for item in items:  # stops at the first: records lists (every search's flights) can be long
            if matches(item, match):
                return item
    return UNKNOWN


_END = object()


def _walk(value: Any, containers: tuple[type, ...], children: Callable[[Any], Any]) -> list[Any]:
    """The non-container values under `value`, depth first, in order. A loop, not recursion: a call's arguments
    come from the log and may nest deeper than Python's recursion limit."""
    out: list[Any] = []
    stack = [iter((value,))]
    while stack:
        item = next(stack[-1], _END)
        if item is _END:
            stack.pop()
        elif isinstance(item, containers):
            stack.append(iter(children(item)))
        elif item is not None and item is not UNKNOWN:
            out.append(item)
    return out


def flatten(value: Any) -> list[Any]:
    """Nested lists made flat: [[a, b], [c]] -> [a, b, c]; a single non-list value -> [value]."""
    return _walk(value, (list,), iter)


def leaves(value: Any) -> list[Any]:
    """The scalar values at any depth of nested mappings and lists, in order: a call's arguments as the values it
    passes (`leaves({'id': 'R1', 'legs': [{'n': 'F1'}]})` -> ['R1', 'F1'])."""
    return _walk(value, (Mapping, list, tuple), lambda v: v.values() if isinstance(v, Mapping) else iter(v))


_PATTERNS: dict[str, re.Pattern] = {}  # the policy's regular expressions, compiled once


def pattern(regex: Any) -> re.Pattern:
    """A regular expression from the policy file, compiled once; a bad one is the policy's error."""
    source = str(regex)
    compiled = _PATTERNS.get(source)
    if compiled is None:
        try:
            compiled = re.compile(source)
        except re.error as exc:
            raise InputError(f"policy regular expression {regex!r} does not compile: {exc}", field="policy")
        if len(_PATTERNS) < 256:  # policies hold a handful; an expression building patterns must not grow it
            _PATTERNS[source] = compiled
    return compiled


def _like(value: Any, regex: Any) -> bool:
    """Is the value a string that the regular expression matches as a whole?"""
    return isinstance(value, str) and pattern(regex).fullmatch(value) is not None


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {"object": Mapping, "array": list, "string": str,
                                                  "boolean": bool, "number": (int, float), "integer": (int, float)}


def _is_json_type(value: Any, kind: Any) -> bool:
    if kind == "null":
        return value is None
    python = _JSON_TYPES.get(kind)
    if python is None:  # a type this check does not know: not its to refuse
        return True
    if kind in ("number", "integer") and isinstance(value, bool):  # JSON's true is no number
        return False
    return isinstance(value, python) and (kind != "integer" or isinstance(value, int) or value.is_integer())


def fits_schema(schema: Any, value: Any) -> bool:
    """Does `value` fit a tool's JSON schema in what a call's shape depends on: `type`, `enum`, `required`,
    `properties`, `additionalProperties` and `items`, at any depth (other keywords are not checked)? A few
    dictionary lookups per argument, where a full validator costs hundreds of calls per tool call."""
    if not isinstance(schema, Mapping):
        return True
    kind = schema.get("type")
    if kind is not None:
        if isinstance(kind, list):
            if not any(_is_json_type(value, k) for k in kind):
                return False
        elif not _is_json_type(value, kind):
            return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        for key in schema.get("required") or ():
            if key not in value:
                return False
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            inner = properties.get(key, extra)
            if inner is False or not fits_schema(inner, item):
                return False
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                if not fits_schema(items, item):
                    return False
    return True


def _kleene_all(values: Any) -> Any:
    """All true: false if any is false, else UNKNOWN if any is unknown, else true (also for an empty list)."""
    values = list(values)
    if any(v is not UNKNOWN and not v for v in values):
        return False
    return UNKNOWN if any(v is UNKNOWN for v in values) else True


def _kleene_any(values: Any) -> Any:
    """Some true: true if any is true, else UNKNOWN if any is unknown, else false."""
    values = list(values)
    if any(v is not UNKNOWN and bool(v) for v in values):
        return True
    return UNKNOWN if any(v is UNKNOWN for v in values) else False


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "known": lambda *values: _known(*values),
    "len": _strict(lambda v: len(v)),
    "sum": _strict(lambda v: sum(x for x in v if isinstance(x, (int, float)))),
    "min": _strict(lambda *v: min(v[0]) if len(v) == 1 else min(v)),
    "max": _strict(lambda *v: max(v[0]) if len(v) == 1 else max(v)),
    "keys": _strict(lambda m: list(m) if isinstance(m, Mapping) else []),
    "pluck": _strict(_pluck),
    "set": _strict(_as_set),
    "all_in": _strict(lambda items, pool: all(i in pool for i in items)),
    "count_prefix": _strict(_count_prefix),
    "hours_between": _strict(_hours_between),
    "lower": _strict(lambda s: str(s).lower()),
    "verb": _strict(lambda name: tool_verb(str(name))),
    "all": _strict(_kleene_all),
    "any": _strict(_kleene_any),
    "flatten": _strict(flatten),
    "leaves": _strict(leaves),
    "like": _strict(_like),
    "find": _find,
    "where": _where,
}

_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_ARITHMETIC: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}


MAX_EXPRESSION_DEPTH = 100  # syntax-tree levels; real policies use under 15


def _depth(tree: ast.AST) -> int:
    """The syntax tree's depth, found without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


class Expression:
    """A checked policy expression, compiled once into nested Python closures (`run(evaluator)`), so judging a turn
    walks no syntax tree: each node became a small function of the evaluator's name and function lookups."""

    __slots__ = ("source", "tree", "run")

    def __init__(self, source: str, tree: ast.Expression):
        self.source, self.tree = source, tree
        self.run: Callable[["Evaluator"], Any] = _compile(tree.body)


def compile_expression(source: str, where: str) -> Expression:
    """Parse once at policy load; refuse anything outside the whitelist with the rule that holds it."""
    try:
        # Parenthesised, so an expression may run over several lines however YAML indents them.
        tree = ast.parse("(" + str(source).strip() + "\n)", mode="eval")
    except SyntaxError as exc:
        raise InputError(f"policy expression in {where} does not parse: {exc.msg}: {source!r}", field=where)
    except (RecursionError, MemoryError):  # the parser's own limit on nesting (`not not ... x`, `1+1+...`)
        raise InputError(f"policy expression in {where} is nested too deeply to parse", field=where) from None
    if _depth(tree) > MAX_EXPRESSION_DEPTH:
        # Compiling and evaluating recurse once a level: refuse here what would exhaust the stack there.
        raise InputError(f"policy expression in {where} nests more than {MAX_EXPRESSION_DEPTH} levels deep",
                         field=where)
    allowed = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.Compare,
               ast.BinOp, ast.Name, ast.Load, ast.Attribute, ast.Subscript, ast.Constant, ast.List, ast.Tuple,
               ast.Call, ast.keyword, ast.IfExp, ast.GeneratorExp, ast.ListComp, ast.comprehension, ast.Store,
               *_COMPARE, *_ARITHMETIC)
    for node in ast.walk(tree):
        if isinstance(node, (ast.GeneratorExp, ast.ListComp)) and (
                len(node.generators) != 1 or not isinstance(node.generators[0].target, ast.Name)
                or node.generators[0].is_async):
            raise InputError(f"policy expression in {where} has a comprehension that is not "
                             f"`... for name in list [if condition]`: {source!r}", field=where)
        if not isinstance(node, allowed):
            raise InputError(f"policy expression in {where} uses {type(node).__name__}, which the policy "
                             f"language does not allow: {source!r}", field=where)
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise InputError(f"policy expression in {where} reads a private name: {source!r}", field=where)
        if isinstance(node, ast.Call) and not isinstance(node.func, ast.Name):
            raise InputError(f"policy expression in {where} calls something that is not a function name",
                             field=where)
    return Expression(str(source), tree)


class Evaluator:
    """Evaluates compiled expressions over `names` (facts, lazily resolved) and `functions`."""

    __slots__ = ("resolve_name", "functions", "locals")

    def __init__(self, resolve_name: Callable[[str], Any], functions: Mapping[str, Callable[..., Any]]):
        """`functions` add to (or replace) the built-in `FUNCTIONS`."""
        self.resolve_name = resolve_name
        self.functions = {**FUNCTIONS, **functions}
        self.locals: dict[str, Any] = {}  # comprehension variables in scope

    def evaluate(self, expression: Expression) -> Any:
        saved, self.locals = self.locals, {}  # a fact never sees the comprehension variables of its caller
        try:
            return expression.run(self)
        finally:
            self.locals = saved


# ------------------------------------------------------------------------------------- the closure compiler
# Each `_compile` case returns `run(evaluator) -> value` with the semantics of its node: UNKNOWN propagates,
# `and`/`or` follow Kleene logic, a type error in a comparison or arithmetic gives UNKNOWN (the facts do not settle
# it), a function's TypeError/ValueError/KeyError gives UNKNOWN.

_LITERAL_NAMES = {"true": True, "false": False, "null": None}


def _compile(node: ast.AST) -> Callable[[Evaluator], Any]:
    compiler = _COMPILERS.get(type(node))
    if compiler is None:
        raise InputError(f"unsupported policy expression node {type(node).__name__}", field="policy")
    return compiler(node)


def _constant(node: ast.Constant) -> Callable[[Evaluator], Any]:
    value = node.value
    return lambda ev: value


def _name(node: ast.Name) -> Callable[[Evaluator], Any]:
    name = node.id
    if name in _LITERAL_NAMES:
        value = _LITERAL_NAMES[name]
        return lambda ev: value

    def load(ev: Evaluator) -> Any:
        scope = ev.locals
        return scope[name] if name in scope else ev.resolve_name(name)
    return load


def _sequence(node: ast.List | ast.Tuple) -> Callable[[Evaluator], Any]:
    items = [_compile(e) for e in node.elts]
    return lambda ev: [item(ev) for item in items]


def _attribute(node: ast.Attribute) -> Callable[[Evaluator], Any]:
    container, key = _compile(node.value), node.attr
    return lambda ev: _field(container(ev), key)


def _subscript(node: ast.Subscript) -> Callable[[Evaluator], Any]:
    container, key = _compile(node.value), _compile(node.slice)
    return lambda ev: _field(container(ev), key(ev))


def _bool_op(node: ast.BoolOp) -> Callable[[Evaluator], Any]:
    """Kleene logic: `true or unknown` is true, `false and unknown` is false, otherwise unknown stays."""
    operands = [_compile(v) for v in node.values]
    decisive = isinstance(node.op, ast.Or)  # the value that settles the whole expression

    def run(ev: Evaluator) -> Any:
        saw_unknown = False
        for operand in operands:
            value = operand(ev)
            if value is UNKNOWN:
                saw_unknown = True
            elif bool(value) == decisive:
                return decisive
        return UNKNOWN if saw_unknown else (not decisive)
    return run


def _unary(node: ast.UnaryOp) -> Callable[[Evaluator], Any]:
    operand, negate = _compile(node.operand), isinstance(node.op, ast.Not)

    def run(ev: Evaluator) -> Any:
        value = operand(ev)
        if value is UNKNOWN:
            return UNKNOWN
        if negate:
            return not value
        try:
            return -value
        except TypeError:  # minus a text or a list: the facts do not settle it
            return UNKNOWN
    return run


def _compare(node: ast.Compare) -> Callable[[Evaluator], Any]:
    first = _compile(node.left)
    steps = [(_COMPARE[type(op)], _compile(right)) for op, right in zip(node.ops, node.comparators)]

    def run(ev: Evaluator) -> Any:
        left = first(ev)
        for test, right_node in steps:
            right = right_node(ev)
            if left is UNKNOWN or right is UNKNOWN:
                return UNKNOWN
            try:
                if not test(left, right):
                    return False
            except TypeError:  # e.g. a number compared with text: the facts do not settle it
                return UNKNOWN
            left = right
        return True
    return run


def _binary(node: ast.BinOp) -> Callable[[Evaluator], Any]:
    left_node, right_node, operation = _compile(node.left), _compile(node.right), _ARITHMETIC[type(node.op)]

    def run(ev: Evaluator) -> Any:
        left, right = left_node(ev), right_node(ev)
        if not _known(left, right):
            return UNKNOWN
        if operation is operator.mul and _too_long(left, right):
            return UNKNOWN
        try:
            return operation(left, right)
        except (TypeError, ZeroDivisionError, OverflowError):
            return UNKNOWN
    return run


_MAX_REPEAT = 1 << 20  # items a repetition (`'-' * n`, `[x] * n`) may make


def _too_long(left: Any, right: Any) -> bool:
    """Would `left * right` repeat a text or a list past `_MAX_REPEAT` items? A count read from a log
    (`'x' * args.n`) must not make the reward allocate gigabytes."""
    for seq, count in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
            return len(seq) * count > _MAX_REPEAT
    return False


def _if_expression(node: ast.IfExp) -> Callable[[Evaluator], Any]:
    test_node, body, orelse = _compile(node.test), _compile(node.body), _compile(node.orelse)

    def run(ev: Evaluator) -> Any:
        test = test_node(ev)
        if test is UNKNOWN:
            return UNKNOWN
        return body(ev) if test else orelse(ev)
    return run


_NO_KEYWORDS: Mapping[str, Any] = {}  # a call without keywords (most) builds no dict; `**` passes a copy, never it


def _call(node: ast.Call) -> Callable[[Evaluator], Any]:
    name = node.func.id
    positional = [_compile(a) for a in node.args]
    keywords = [(k.arg, _compile(k.value)) for k in node.keywords]

    def run(ev: Evaluator) -> Any:
        function = ev.functions.get(name)
        if function is None:
            raise InputError(f"policy expression calls unknown function {name!r}", field="policy")
        args = [a(ev) for a in positional]
        kwargs = {key: value(ev) for key, value in keywords} if keywords else _NO_KEYWORDS
        try:
            return function(*args, **kwargs)
        except (TypeError, ValueError, KeyError):
            return UNKNOWN
    return run


def _comprehension(node: ast.GeneratorExp | ast.ListComp) -> Callable[[Evaluator], Any]:
    """`[expr for x in items if cond]`: the values of expr for each item whose conditions are true (an UNKNOWN
    condition leaves the item out); an UNKNOWN list gives UNKNOWN."""
    generator = node.generators[0]
    source, name = _compile(generator.iter), generator.target.id
    conditions, element = [_compile(c) for c in generator.ifs], _compile(node.elt)

    def run(ev: Evaluator) -> Any:
        items = source(ev)
        if items is UNKNOWN:
            return UNKNOWN
        if not isinstance(items, (list, tuple, frozenset, set)):
            items = list(items) if isinstance(items, Mapping) else []
        saved = dict(ev.locals)
        out = []
        try:
            for item in items:
                ev.locals[name] = item
                if all(_is_true(condition(ev)) for condition in conditions):
                    out.append(element(ev))
        finally:
            ev.locals = saved
        return out
    return run


_COMPILERS: dict[type, Callable[[Any], Callable[[Evaluator], Any]]] = {
    ast.Constant: _constant, ast.Name: _name, ast.List: _sequence, ast.Tuple: _sequence,
    ast.Attribute: _attribute, ast.Subscript: _subscript, ast.BoolOp: _bool_op, ast.UnaryOp: _unary,
    ast.Compare: _compare, ast.BinOp: _binary, ast.IfExp: _if_expression, ast.Call: _call,
    ast.GeneratorExp: _comprehension, ast.ListComp: _comprehension,
}


def _is_true(value: Any) -> bool:
    return value is not UNKNOWN and bool(value)


def _field(container: Any, key: Any) -> Any:
    if container is UNKNOWN or container is None or key is UNKNOWN:
        return UNKNOWN
    if type(container) is dict or isinstance(container, Mapping):  # `type` first: abc checks are slow
        try:
            return container.get(key, UNKNOWN)
        except TypeError:  # a list or mapping as the key: no field has it
            return UNKNOWN
    if isinstance(container, list) and isinstance(key, int) and -len(container) <= key < len(container):
        return container[key]
    return UNKNOWN
