"""The package's shape (bench/import_graph.py): no import cycle, no import up a floor, no private name used across
modules, a docstring naming each module's job, old names that warn and answer from their new home."""

import ast
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository


def _import_graph():
    spec = importlib.util.spec_from_file_location("import_graph", os.path.join(ROOT, "bench", "import_graph.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycle_between_bertkit_modules_even_through_annotations():
    graph = _import_graph()
    edges = graph.graph(typing=True)  # imports under `if TYPE_CHECKING:` too: a reader follows them
    assert "bertkit.model" in edges and "bertkit.config" in edges["bertkit.model"]  # the graph is read at all
    assert "bertkit.tokenizer" in edges["bertkit.quantize"]  # an annotation's import (Tokenizer) is counted
    assert graph.cycles(edges) == []


def test_no_import_goes_up_a_floor():
    """bench/import_graph.py's FLOORS: the foundation, the model, text and data, tasks and inference, training,
    serving, entry points; each module imports from its floor or below, and every module has a floor."""
    graph = _import_graph()
    edges = graph.graph()
    # the tokenizer needs no corpus: learning a vocabulary from one is vocab.py's job
    assert not any(t.startswith("bertkit.data") for t in edges["bertkit.tokenizer"])
    assert graph.floor_problems(edges) == []


def test_the_floor_check_finds_an_import_up_a_floor_and_a_module_without_a_floor():
    graph = _import_graph()
    problems = graph.floor_problems(
        {"bertkit.tokenizer": {"bertkit.train.loop"}, "bertkit.train.loop": {"bertkit.tokenizer"}, "bertkit.zz": set()}
    )
    assert problems == [
        "bertkit.zz: no floor in FLOORS (bench/import_graph.py)",
        "bertkit.tokenizer (floor 2: text and data: the tokenizer, vocabularies, corpora, datasets, rows) imports "
        "bertkit.train.loop (floor 4: training)",
    ]


def test_imports_for_annotations_count_for_cycles_not_for_floors(tmp_path):
    graph = _import_graph()
    path = tmp_path / "m.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bertkit.train.loop import Run\n"
        "from bertkit.errors import BertkitError\n",
        encoding="utf-8",
    )
    known = {"bertkit.errors", "bertkit.train.loop", "bertkit.train"}
    assert graph.imports("bertkit.m", str(path), known) == {"bertkit.errors"}  # the floors' graph
    assert graph.imports("bertkit.m", str(path), known, typing=True) == known  # the cycles' graph


def test_the_cycle_finder_finds_a_cycle():
    graph = _import_graph()
    assert graph.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert graph.cycles({"a": {"b"}, "b": set()}) == []


# ----- no module reaches into another's private names ------------------------------------------------
PACKAGE = os.path.join(ROOT, "bertkit")


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


# ----- every module says its one job -------------------------------------------------------------
def test_every_module_has_a_docstring_that_names_its_job():
    missing = {}
    for module, path in sorted(bertkit_modules().items()):
        with open(path, encoding="utf-8") as fh:
            doc = ast.get_docstring(ast.parse(fh.read())) or ""
        first = doc.split("\n\n")[0].strip()
        if len(first) < 20:  # a sentence at least, not a placeholder
            missing[module] = first
    assert missing == {}, f"modules whose docstring does not say what they are for: {missing}"


# ----- every function fits on a screen or so ----------------------------------------------------------
LONGEST_FUNCTION = 80  # lines, decorators and docstring included


def long_functions(source: str, limit: int = LONGEST_FUNCTION) -> list[tuple[str, int]]:
    """(name, lines) of each function or method of `source` longer than `limit` lines."""
    return [
        (node.name, node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - min([node.lineno, *(d.lineno for d in node.decorator_list)]) + 1 > limit
    ]


def test_no_bertkit_function_is_longer_than_80_lines():
    found = {}
    for module, path in sorted(bertkit_modules().items()):
        with open(path, encoding="utf-8") as fh:
            found.update({f"{module}.{name}": n for name, n in long_functions(fh.read())})
    assert found == {}, f"functions over {LONGEST_FUNCTION} lines (split them by job): {found}"


def test_the_length_check_counts_a_function_from_its_decorator_to_its_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(78))
    source = f"@staticmethod\ndef f():\n{body}\n"  # 80 lines
    assert long_functions(source) == [] and long_functions(source + "    return x0\n") == [("f", 81)]


# ----- old names: one release of warnings, then gone -----------------------------------------------
def moved_tables() -> dict[str, dict[str, str]]:
    """Old module -> {old name: "new.module:new_name"}, from every bertkit module whose __getattr__ is a moved()."""
    import importlib

    from bertkit.deprecated import moved

    tables = {}
    for module in sorted(bertkit_modules()):
        if module.endswith("__main__"):
            continue
        getter = getattr(importlib.import_module(module), "__getattr__", None)
        if isinstance(getter, moved):
            tables[module] = getter.names
    return tables


def test_every_moved_name_warns_once_read_and_is_the_new_object():
    import importlib
    import warnings

    tables = moved_tables()
    assert "bertkit.tokenizer" in tables and tables["bertkit.tokenizer"]["train_vocab"] == "bertkit.vocab:train_vocab"
    for old_module, names in tables.items():
        module = importlib.import_module(old_module)
        for name, target in names.items():
            new_module, new_name = target.split(":")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = getattr(module, name)
            assert value is getattr(importlib.import_module(new_module), new_name), f"{old_module}.{name}"
            assert [w.category for w in caught] == [DeprecationWarning], f"{old_module}.{name}"
            assert f"is now {new_module}.{new_name}" in str(caught[0].message)


def test_an_unknown_name_is_still_an_attribute_error():
    import bertkit.tokenizer

    try:
        bertkit.tokenizer.no_such_name  # noqa: B018
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("an unknown name was answered")


def test_no_bertkit_module_uses_an_old_name():
    """The package imports every moved name from its new home: the old addresses are for users' code only."""
    tables = moved_tables()
    modules = bertkit_modules()
    found = []
    for module, path in sorted(modules.items()):
        package = module.split(".") if path.endswith("__init__.py") else module.split(".")[:-1]
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                stem = node.module.split(".") if node.module else []
                base = ".".join(package[: len(package) - node.level + 1] + stem) if node.level else node.module
                for alias in node.names:
                    if alias.name in tables.get(base, {}):
                        found.append(f"{module} line {node.lineno}: {base}.{alias.name}")
    assert found == []


def test_commands_that_need_no_model_start_without_torch():
    """`bertkit prepare` (and its worker processes, which import the same modules), `bertkit tokenize` and
    `bertkit tokenizer train` never load torch: bertkit/__init__.py's promise, kept across the moves."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import bertkit.commands.prepare, bertkit.commands.tokenize, bertkit.commands.tokenizer\n"
        "import bertkit.data.prepare, bertkit.data.rows, bertkit.data.encode\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_lazy_names_of_bertkit_are_what_type_checkers_are_told():
    """bertkit/__init__.py loads its names on first use (_LAZY) and names the same ones, from the same modules,
    under `if TYPE_CHECKING:` for type checkers and editors: the two lists agree."""
    import bertkit

    path = bertkit_modules()["bertkit"]
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    told = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.level == 1
                told.update({alias.name: f"bertkit.{imp.module}" for alias in imp.names})
    assert told == bertkit._LAZY
    assert all(getattr(bertkit, name) is not None for name in told)


def test_run_main_warns_and_answers_as_is_main():
    import warnings

    from bertkit.train.loop import Run

    run = Run.__new__(Run)
    run.rank = 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run.main is False and run.is_main is False
    assert [str(w.message) for w in caught] == ["Run.main is now Run.is_main; the old name goes in bertkit 0.2"]
