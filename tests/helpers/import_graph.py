"""The import statements of the project's source trees, read from the AST (nothing is imported), so tests can hold
the layout to its rules: which packages a plugin may import, and no import cycle anywhere.

Every import counts, at module level and inside functions (a function-level import is a dependency all the same,
only a later one); imports under ``if TYPE_CHECKING:`` do not (they never run). ``importlib.import_module("x")`` and
``__import__("x")`` with a literal name count as imports of ``x``.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
#: Source roots: the directory that holds each top-level package.
KERNEL, PLUGINS = ROOT / "kernel", ROOT / "plugins"


@dataclass(frozen=True)
class Import:
    path: Path  # the importing file
    line: int
    module: str  # the importing module's dotted name
    target: str  # what it imports, absolute: a module, or a module's attribute (resolved by `resolve`)

    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if any(p in ("__pycache__", "build") or p.endswith(".egg-info") for p in rel):
            continue
        yield path


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _absolute(module: str | None, level: int, importer: str, is_package: bool) -> str:
    if not level:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[:len(base) - (level - 1)] if level > 1 else base
    return ".".join([*base, module] if module else base)


def imports_of(path: Path, root: Path) -> list[Import]:
    importer = module_name(path, root)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append(Import(path, node.lineno, importer, alias.name))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, importer, is_package)
            for alias in node.names:
                found.append(Import(path, node.lineno, importer, f"{base}.{alias.name}" if alias.name != "*"
                                    else base))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in ("import_module", "__import__"):
                found.append(Import(path, node.lineno, importer, node.args[0].value))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def modules(*roots: Path) -> dict[str, Path]:
    """Every module (dotted name -> file) under the source roots."""
    return {module_name(p, r): p for r in roots for p in source_files(r)}


def resolve(target: str, known: dict[str, Path]) -> str | None:
    """The module an import target lands in: the target itself when it is a module, else the longest known prefix
    (``from pkg import name`` imports `pkg` when `name` is an attribute); None when it is outside the trees."""
    parts = target.split(".")
    while parts:
        name = ".".join(parts)
        if name in known:
            return name
        parts.pop()
    return None


def graph(*roots: Path) -> tuple[dict[str, set[str]], dict[tuple[str, str], Import]]:
    """Module -> the modules it imports (inside the trees), and one import statement per edge (to show it)."""
    known = modules(*roots)
    edges: dict[str, set[str]] = {name: set() for name in known}
    sample: dict[tuple[str, str], Import] = {}
    for name, path in known.items():
        root = next(r for r in roots if r in path.parents)
        for imp in imports_of(path, root):
            target = resolve(imp.target, known)
            if target is None or target == name:
                continue
            edges[name].add(target)
            sample.setdefault((name, target), imp)
    return edges, sample


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def cycle_in(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One cycle through a strongly connected component, as a path that ends where it starts."""
    members = set(component)
    start = component[0]
    path, seen = [start], {start}
    node = start
    while True:
        nxt = sorted(c for c in edges[node] if c in members)
        back = [c for c in nxt if c == start]
        if back and len(path) > 1:
            return [*path, start]
        step = next((c for c in nxt if c not in seen), None)
        if step is None:  # every way on is visited: close the loop at the first visited member
            step = next(c for c in nxt)
            return [*path[path.index(step):], step]
        path.append(step)
        seen.add(step)
        node = step
