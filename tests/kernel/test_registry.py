"""Discovery, naming, availability and plugin filtering, as a user of `plugins list` sees them."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from stateset_agents.core.errors import ComponentUnavailable, UnknownComponent
from stateset_agents.core.registry import discover
from stateset_agents.core.runtimes import load_component


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "stateset_agents", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


def test_first_party_plugins_register_through_the_entry_point_group(registry):
    assert {"ingestors", "rewards", "trainers", "evaluators", "providers"} <= set(registry.plugins)
    assert registry.plugins["rewards"] == "stateset-agents"


def test_kind_name_and_unique_bare_names_resolve(registry):
    assert registry.resolve("reward:test_length").name == "test_length"
    assert registry.resolve("test_length").full_name == "reward:test_length"
    assert registry.resolve("test_countdown", kind="trainer").kind == "trainer"


def test_unknown_name_lists_known_names_of_that_kind(registry):
    with pytest.raises(UnknownComponent) as err:
        registry.resolve("reward:nope")
    assert "test_length" in str(err.value) and "test_faulty" in str(err.value)
    with pytest.raises(UnknownComponent, match="is a trainer"):
        registry.resolve("trainer:test_countdown", kind="reward")


def test_missing_dependencies_are_listed_and_refused_with_the_install_command(registry):
    spec = registry.resolve("reward:test_unavailable")
    assert not spec.available and spec.missing == ["no_such_module_xyz"]
    with pytest.raises(ComponentUnavailable) as err:
        load_component("reward:test_unavailable")
    assert "pip install no-such-module-xyz" in str(err.value)
    out = cli("plugins", "list", "--json")
    rows = {r["component"]: r for r in json.loads(out.stdout)["components"]}
    assert rows["reward:test_unavailable"]["available"] is False
    assert rows["reward:test_unavailable"]["install"] == "pip install no-such-module-xyz"
    assert rows["reward:test_length"]["available"] is True


def test_using_an_unavailable_component_from_the_cli_is_a_clear_error_not_a_trace():
    out = cli("plugin", "serve", "reward:test_unavailable", env={"STATESET_PLUGIN_TOKEN": "t"})
    assert out.returncode != 0
    assert "pip install no-such-module-xyz" in out.stderr
    assert "Traceback" not in out.stderr


def test_env_var_limits_which_plugins_load(monkeypatch):
    monkeypatch.setenv("STATESET_AGENTS_PLUGINS", "rewards")
    monkeypatch.delenv("STATESET_AGENTS_PLUGIN_MODULES")
    reg = discover()
    assert set(reg.plugins) == {"rewards"}
    assert all(s.kind == "reward" for s in reg.all())


def test_plugins_list_table_shows_every_component():
    out = cli("plugins", "list", env={"COLUMNS": "160"})
    assert out.returncode == 0, out.stderr
    for name in ("reward:test_length", "trainer:test_countdown", "ingestor:test_lines"):
        assert name in out.stdout
    assert "unavailable" in out.stdout


def test_a_class_that_is_not_the_kinds_base_class_is_refused():
    from stateset_agents.core.errors import StatesetError
    from stateset_agents.core.registry import Registry, _make_register

    register = _make_register(Registry(), "reward", "p", "pkg")
    with pytest.raises(StatesetError, match="does not subclass"):
        register(dict)
