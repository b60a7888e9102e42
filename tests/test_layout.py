"""The package's shape: no bertkit module imports another that imports it back (bench/import_graph.py)."""

import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def _import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", os.path.join(HERE, "..", "bench", "import_graph.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycle_between_bertkit_modules():
    graph = _import_graph()
    edges = graph.graph()
    assert "bertkit.model" in edges and "bertkit.config" in edges["bertkit.model"]  # the graph is read at all
    assert graph.cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = _import_graph()
    assert graph.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert graph.cycles({"a": {"b"}, "b": set()}) == []
