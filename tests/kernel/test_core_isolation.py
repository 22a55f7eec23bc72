"""The layout says what is kernel and what is application: `stateset_agents.core` (contracts, registry, runtimes,
components, conformance, errors, JSON I/O) imports nothing else of the package, and the helper API for plugins
(`stateset_agents.plugin_api`) imports only the core and itself. Function-level imports count (read from the AST)."""
from __future__ import annotations

from tests.helpers.import_graph import KERNEL, imports_of, source_files


def _outside(layer: str, allowed: tuple[str, ...], kernel=KERNEL) -> list:
    offending = []
    for path in source_files(kernel / "stateset_agents" / layer):
        for imp in imports_of(path, kernel):
            parts = imp.target.split(".")
            if parts[0] != "stateset_agents":
                continue
            # `from stateset_agents import X` reaches the package's facade, which imports the application too
            if len(parts) < 2 or parts[1] not in allowed:
                offending.append(imp)
    return offending


def _say(offending) -> str:
    return "\n".join(f"{imp.where()}: {imp.module} imports {imp.target}" for imp in offending)


def test_the_core_imports_only_itself():
    offending = _outside("core", ("core",))
    assert not offending, "the core reaches outside stateset_agents.core:\n" + _say(offending)


def test_the_plugin_api_imports_only_the_core_and_itself():
    offending = _outside("plugin_api", ("core", "plugin_api"))
    assert not offending, "the plugin helper API reaches into the application:\n" + _say(offending)


def test_the_check_sees_an_import_out_of_the_core(tmp_path):
    core = tmp_path / "stateset_agents" / "core"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "fine.py").write_text("from . import bad\nfrom .bad import f\n")
    (core / "bad.py").write_text("def f():\n    from ..pipeline import improve\n")
    found = [(imp.module, imp.line, imp.target) for imp in _outside("core", ("core",), kernel=tmp_path)]
    assert found == [("stateset_agents.core.bad", 2, "stateset_agents.pipeline.improve")]
