"""The layout of tests/ and benchmarks/: tests share helpers as a package (`from tests.helpers.X import ...`, the
repo root on sys.path through pytest's `pythonpath`), nothing edits sys.path, and benchmarks import the project
package, never the tests."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
BENCHMARKS = ROOT / "benchmarks"
# insert/append/extend, assignment or augmented assignment, and pytest's monkeypatch.syspath_prepend
SYS_PATH_EDIT = re.compile(r"sys\.path\s*\.\s*(insert|append|extend)\s*\(|sys\.path\s*(\+=|=[^=])"
                           r"|sys\.path\s*\[[^\]]*\]\s*=[^=]|syspath_prepend")


def _python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


def test_nothing_in_tests_or_benchmarks_edits_sys_path():
    me = Path(__file__).resolve()
    edits = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in _python_files(TESTS, BENCHMARKS) if path.resolve() != me
             for n, line in enumerate(path.read_text().splitlines(), 1) if SYS_PATH_EDIT.search(line)]
    assert not edits, ("sys.path edited (import a shared test helper as `from tests.helpers.X import ...`; run a "
                       "helper script with `python -m tests.helpers.X`):\n" + "\n".join(edits))


def test_benchmarks_import_the_package_never_the_tests():
    borrowed = [f"{path.relative_to(ROOT)}:{n}: import {module}" for path in _python_files(BENCHMARKS)
                for n, module in _imports(path) if module.split(".")[0] == "tests"]
    assert not borrowed, "a benchmark imports tests/ (move what it needs into benchmarks/ or the package):\n" + \
        "\n".join(borrowed)


def test_every_test_directory_is_a_package():
    """So each module imports by its dotted name, and none depends on pytest putting its directory on sys.path."""
    dirs = {p.parent for p in TESTS.rglob("*.py") if p.name.startswith("test_") or p.name == "conftest.py"}
    missing = sorted(str(d.relative_to(ROOT)) for d in dirs | {TESTS} if not (d / "__init__.py").exists())
    assert not missing, "test directories without __init__.py: " + ", ".join(missing)


def test_tests_import_their_helpers_by_package_path():
    """`from toy_rewards import ...` only worked through a sys.path edit: a module of tests/ imports as tests.*."""
    local = {p.stem for p in _python_files(TESTS) if p.stem != "__init__"} | {
        p.name for p in TESTS.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}  # (not tests/ itself)
    local -= {name for name in local if _installed_elsewhere(name)}  # tests/mcp beside the `mcp` SDK
    by_name = [f"{path.relative_to(ROOT)}:{n}: import {module}" for path in _python_files(TESTS)
               for n, module in _imports(path) if module.split(".")[0] in local]
    assert not by_name, "a test module imported by its bare name (use `tests.<dir>.<module>`):\n" + "\n".join(by_name)


def _installed_elsewhere(name: str) -> bool:
    """A top-level name that imports as a package outside tests/ (a test directory named after the SDK it tests)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    origin = spec.origin if spec and spec.origin else (list(spec.submodule_search_locations or [None])[0] if spec
                                                        else None)
    return bool(origin) and TESTS.resolve() not in Path(origin).resolve().parents


def test_no_conftest_is_imported():
    """Fixtures two directories share live in tests.helpers (a conftest imports them from there)."""
    found = [f"{path.relative_to(ROOT)}:{n}: import {module}" for path in _python_files(TESTS)
             for n, module in _imports(path) if module.split(".")[-1] == "conftest"]
    assert not found, "a conftest imported (move the shared fixture into tests/helpers/):\n" + "\n".join(found)


def test_the_rules_catch_what_they_forbid(tmp_path):
    assert SYS_PATH_EDIT.search('sys.path.insert(0, str(HERE))')
    assert SYS_PATH_EDIT.search("sys.path.append('x')") and SYS_PATH_EDIT.search("sys.path[:0] = [x]")
    assert SYS_PATH_EDIT.search("sys.path += [x]") and SYS_PATH_EDIT.search("monkeypatch.syspath_prepend(d)")
    assert not SYS_PATH_EDIT.search("its own directory is sys.path[0], so") and not SYS_PATH_EDIT.search(
        "if sys.path == before:")
    module = tmp_path / "m.py"
    module.write_text("import tests.helpers.realdata\nfrom tests.helpers import toy_rewards\nfrom . import x\n")
    assert _imports(module) == [(1, "tests.helpers.realdata"), (2, "tests.helpers")]
