"""No import cycle among the kernel's and the plugins' modules, counting imports inside functions (a cycle that
only closes at call time still makes each side depend on the other's internals)."""
from __future__ import annotations

from tests.helpers.import_graph import KERNEL, PLUGINS, cycle_in, graph, strongly_connected


def test_no_import_cycles():
    edges, sample = graph(KERNEL, PLUGINS)
    shown = []
    for component in strongly_connected(edges):
        cycle = cycle_in(component, edges)
        steps = [f"  {a} -> {b} ({sample[(a, b)].where()})" for a, b in zip(cycle, cycle[1:])]
        shown.append(f"{len(component)} modules: {', '.join(component)}\n" + "\n".join(steps))
    assert not shown, "import cycles:\n" + "\n\n".join(shown)


def test_the_cycle_finder_finds_one():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert strongly_connected(edges) == [["a", "b", "c"]]
    assert cycle_in(["a", "b", "c"], edges) == ["a", "b", "c", "a"]
