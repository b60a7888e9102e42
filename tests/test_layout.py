"""The package's shape: no bertkit module imports another that imports it back (bench/import_graph.py)."""

import ast
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


# ----- no module reaches into another's private names ------------------------------------------------
PACKAGE = os.path.join(HERE, "..", "bertkit")


def bertkit_modules() -> dict[str, str]:
    """Module name -> path, for every .py file of the package (a package's name for its __init__.py)."""
    found = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                parts = os.path.relpath(os.path.join(folder, name), os.path.dirname(PACKAGE))[:-3].split(os.sep)
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = os.path.join(folder, name)
    return found


def private_uses(source: str, module: str, modules: dict[str, str]) -> list[str]:
    """`from .x import _y`, `from bertkit.x import _y` and `x._y` (x a bertkit module bound by an import) in the
    source of bertkit module `module` (e.g. "bertkit.serve.engine"); modules: bertkit_modules()."""
    package = module.split(".") if modules[module].endswith("__init__.py") else module.split(".")[:-1]
    tree = ast.parse(source)
    found, aliases = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            stem = node.module.split(".") if node.module else []
            base = ".".join(package[: len(package) - node.level + 1] + stem) if node.level else node.module
            if base.split(".")[0] != "bertkit":
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"line {node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}")
                if f"{base}.{alias.name}" in modules:  # a module bound to a name: its attributes are checked below
                    aliases[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            aliases.update(
                {
                    alias.asname: alias.name
                    for alias in node.names
                    if alias.asname and alias.name.split(".")[0] == "bertkit"
                }
            )
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
        ):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr} ({aliases[node.value.id]})")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_bertkit_module_imports_another_modules_private_names():
    """One home for each thing means public names there: serve, embed, bench and tests once imported the commands'
    _load / _json; inference.py holds them now."""
    modules = bertkit_modules()
    assert "bertkit.inference" in modules and modules["bertkit.tasks"].endswith("__init__.py")
    problems = {}
    for module, path in sorted(modules.items()):
        with open(path, encoding="utf-8") as fh:
            uses = private_uses(fh.read(), module, modules)
        if uses:
            problems[module] = uses
    assert problems == {}, f"private names used across modules (make them public where they belong): {problems}"


def test_the_private_name_finder_finds_each_form():
    source = (
        "from ..inference_cli import _load, windows\nfrom bertkit.tasks.base import _x\nfrom .. import embed\n"
        "import bertkit.inference_cli as p\nimport sys\nembed._read_json('a', 'b')\np._json(1)\n"
        "sys._getframe(0)\n"
        "from ..embed import __all__\nfrom .engine import _too_long\n"
    )
    assert private_uses(source, "bertkit.serve.app", bertkit_modules()) == [
        "line 1: from ..inference_cli import _load",
        "line 2: from bertkit.tasks.base import _x",
        "line 10: from .engine import _too_long",
        "line 6: embed._read_json (bertkit.embed)",
        "line 7: p._json (bertkit.inference_cli)",
    ]
