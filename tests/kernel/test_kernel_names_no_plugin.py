"""The kernel names no plugin: every component name a face offers comes from the registry, so no plugin's name (nor
its package) appears in kernel/**/*.py as an identifier or inside a string literal (docstrings, help texts and
f-strings included; comments are not code). The names are the registry's, not a list in this test: every
component an installed plugin package registers, first-party or not, and every plugin's import package."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from stateset_agents.core.components import KINDS
from stateset_agents.core.registry import discover

KERNEL = Path(__file__).resolve().parents[2] / "kernel" / "stateset_agents"

#: Component names that are also words of the kernel's own vocabulary. For these only `KIND:NAME` counts; the word
#: alone is the kernel's. Each with why.
GENERIC_WORDS = {
    "local": "a base model's source kind (a local path), and prose; the provider is named provider:local",
    "chat": "the `chat` and `chat-remote` commands, chat sessions and the ledger's `chat` kind",
    "paired": "the paired statistics the kernel itself computes (`stats`, `gate`); the evaluator is evaluator:paired",
    "judge": "`evaluate --judge-model`'s judge, a role any evaluator offering `judge` fills",
}


def kernel_files() -> list[Path]:
    """Every Python file of the kernel but the generated contracts."""
    return [p for p in sorted(KERNEL.rglob("*.py")) if "__pycache__" not in p.parts and "_pb2" not in p.name]


def plugin_names(registry) -> tuple[set[str], set[str]]:
    """(component names, plugin import packages) of the plugins installed through the entry-point group (test-only
    modules loaded by environment are not plugins a user installs)."""
    from importlib.metadata import entry_points

    specs = [s for s in registry.all() if s.package != "(module)"]
    names = {s.name for s in specs}
    packages = {ep.value.split(":")[0].split(".")[0] for ep in entry_points(group="stateset_agents")}
    return names, packages


def offences(path: Path, names: set[str], packages: set[str]) -> list[str]:
    strict = {n for n in names if n not in GENERIC_WORDS}
    word = re.compile(r"(?<!\w)(" + "|".join(map(re.escape, sorted(strict | packages, key=len, reverse=True)))
                      + r")(?!\w)") if strict | packages else None
    qualified = re.compile(r"(?<!\w)(?:" + "|".join(KINDS) + r"):(" + "|".join(map(re.escape, sorted(names)))
                           + r")(?!\w)")
    found = []
    shown = path.relative_to(KERNEL.parent) if path.is_relative_to(KERNEL.parent) else path
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        where = f"{shown}:{tok.start[0]}"
        if tok.type == tokenize.NAME and (tok.string in strict or tok.string in packages):
            found.append(f"{where}: identifier {tok.string}")
        elif tok.type == tokenize.STRING:
            try:
                text = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):  # an f-string: its text, placeholders and all
                text = tok.string
            if not isinstance(text, str):
                continue
            hits = {m.group(0) for m in qualified.finditer(text)} | (
                {m.group(1) for m in word.finditer(text)} if word else set())
            found.extend(f"{where}: {hit!r} in {text[:60]!r}" for hit in sorted(hits))
    return found


@pytest.fixture(scope="module")
def installed(monkeypatch_module):
    monkeypatch_module.delenv("STATESET_AGENTS_PLUGINS", raising=False)
    return plugin_names(discover())


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_the_names_come_from_the_registry(installed):
    names, packages = installed
    # the first-party plugins alone register about two dozen components; an empty set would make the test vacuous
    assert len(names) >= 20 and "stateset_plugins" in packages
    assert not (GENERIC_WORDS.keys() - names), "an allowed word that no plugin uses is not needed: drop it"


def test_no_kernel_module_names_a_plugin(installed):
    names, packages = installed
    files = kernel_files()
    assert len(files) > 40
    found = [line for path in files for line in offences(path, names, packages)]
    assert not found, f"{len(found)} plugin names in the kernel:\n" + "\n".join(found)


def test_the_check_catches_what_it_must(tmp_path, installed):
    names, packages = installed
    probe = tmp_path / "probe.py"
    probe.write_text('"""Uses `evaluator:chat`."""\nDEFAULT = "gsm8k"\ngrpo = 1\nx = f"{y} via runpod"\n'
                     'import stateset_plugins.rewards\n# a comment may say tool_calling\nz = "a local chat"\n')
    found = "\n".join(offences(probe, names, packages))
    for hit in ("'evaluator:chat'", "'gsm8k'", "identifier grpo", "'runpod'", "identifier stateset_plugins"):
        assert hit in found, hit
    assert "tool_calling" not in found and "'local'" not in found and "'chat'" not in found
