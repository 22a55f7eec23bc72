"""Plugins import only the core and the helper API for plugins (`stateset_agents.plugin_api`), never the pipeline,
`remote` or the faces; and the plugin packages share model code through `stateset_plugins.models` alone, never
through each other's internals. Every import counts, inside functions too (read from the AST)."""
from __future__ import annotations

from tests.helpers.import_graph import KERNEL, PLUGINS, ROOT, imports_of, source_files

#: What of the kernel a plugin may import: the core, and the helper API for plugins.
CORE = ("core",)
ALLOWED = {"stateset_agents", *(f"stateset_agents.{m}" for m in (*CORE, "plugin_api"))}
#: The one plugin package every other may import: backend types, model loading, chat format, tokenisation.
SHARED = "models"
KERNEL_MODULES = {p.stem if p.suffix else p.name for p in (KERNEL / "stateset_agents").iterdir()
                  if p.suffix == ".py" or (p / "__init__.py").exists()}
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*/*") if p.is_dir() and (p / "__init__.py").exists())


def _kernel_module(target: str) -> str | None:
    """The kernel module (package or first-level module) an import reaches, or None outside the kernel.
    `from stateset_agents import remote` reaches `stateset_agents.remote`; `from stateset_agents import Reward`
    the package itself."""
    parts = target.split(".")
    if parts[0] != "stateset_agents":
        return None
    if len(parts) > 1 and parts[1] in KERNEL_MODULES:
        return ".".join(parts[:2])
    return "stateset_agents"


def _plugin_files():
    yield from ((p, PLUGINS) for p in source_files(PLUGINS / "stateset_plugins"))
    for package in EXAMPLES:  # third parties' plugins keep the same rule
        yield from ((p, package.parent) for p in source_files(package))


def test_plugins_import_only_the_core_and_the_helper_api():
    offending = []
    for path, root in _plugin_files():
        for imp in imports_of(path, root):
            reached = _kernel_module(imp.target)
            if reached is not None and reached not in ALLOWED:
                offending.append(f"{imp.where()}: {imp.module} imports {imp.target}")
    assert not offending, ("plugins import the kernel's application (import the helper API "
                           "`stateset_agents.plugin_api` or the core instead):\n" + "\n".join(offending))


def test_plugin_packages_share_code_only_through_the_model_package():
    offending = []
    for path in source_files(PLUGINS / "stateset_plugins"):
        for imp in imports_of(path, PLUGINS):
            mine, theirs = imp.module.split("."), imp.target.split(".")
            if theirs[0] != "stateset_plugins" or len(mine) < 2 or len(theirs) < 2:
                continue
            if theirs[1] != mine[1] and (theirs[1] != SHARED or mine[1] == SHARED):
                offending.append(f"{imp.where()}: {imp.module} imports {imp.target}")
    assert not offending, (f"plugin packages import each other (share code through stateset_plugins.{SHARED}, "
                           "or the helper API):\n" + "\n".join(offending))


def test_the_checks_see_function_level_and_relative_imports(tmp_path):
    """The walker finds an import inside a function and resolves a relative one (else the tests above prove
    nothing)."""
    package = tmp_path / "stateset_plugins" / "trainers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "x.py").write_text("def f():\n    from ..evaluators import chat\n"
                                  "    import stateset_agents.remote.plan\n    __import__('stateset_agents.cli')\n")
    targets = [(i.line, i.target) for i in imports_of(package / "x.py", tmp_path)]
    assert targets == [(2, "stateset_plugins.evaluators.chat"), (3, "stateset_agents.remote.plan"),
                       (4, "stateset_agents.cli")]
    assert [_kernel_module(t) for _, t in targets] == [None, "stateset_agents.remote", "stateset_agents.cli"]
