"""The import graph of the bertkit package: its cycles and its floors (none going up is the rule).

    python bench/import_graph.py            # every cycle and every import that goes up a floor, or "none"
    python bench/import_graph.py --edges    # also each module's bertkit imports
    python bench/import_graph.py --floors   # also the modules of each floor

Every import counts, at the top of a module or inside a function: a cycle there is a design knot
even when Python's lazy import lets it run. Importing bertkit.a.b also runs bertkit/a/__init__.py,
so that edge counts too, except from inside that package (its __init__ is already running) and for
the root package (every module would reach it). Imports under `if TYPE_CHECKING:` never run: the
floors leave them out (an annotation may name a type of a higher floor), the cycles count them (a reader
follows an annotation's import as any other).

FLOORS puts every module on a floor, from the bottom: a module imports modules of its own floor or of
floors below it, never above (and no cycle within a floor). A new module gets a floor here.
"""

from __future__ import annotations

import ast
import os
import sys

PACKAGE = "bertkit"

# bottom to top; an entry names a module, or a package and everything in it ("bertkit.data")
FLOORS = [
    (
        "foundation: errors, files, text, flags",
        [
            "bertkit",
            "bertkit.errors",
            "bertkit.deprecated",
            "bertkit.labels",
            "bertkit.text",
            "bertkit.threads",
            "bertkit.files",
            "bertkit.finite",
            "bertkit.outfolder",
            "bertkit.fonts",
            "bertkit.options",
            "bertkit.devices",
            "bertkit.activations",
        ],
    ),
    (
        "the model",
        [
            "bertkit.config",
            "bertkit.padding",
            "bertkit.grouping",
            "bertkit.kernels",
            "bertkit.attention",
            "bertkit.checkpoint",
            "bertkit.plan",
            "bertkit.pretrained",
            "bertkit.model",
            "bertkit.heads",
            "bertkit.electra",
            "bertkit.modernbert",
            "bertkit.init",
            "bertkit.pooling",
        ],
    ),
    (
        "text and data: the tokenizer, vocabularies, corpora, datasets, rows",
        ["bertkit.pieces", "bertkit.cutting", "bertkit.encoding", "bertkit.tokenizer", "bertkit.vocab", "bertkit.data"],
    ),
    (
        "tasks, scores and inference",
        [
            "bertkit.metrics",
            "bertkit.tasks",
            "bertkit.quantize",
            "bertkit.inference",
            "bertkit.masked_lm",
            "bertkit.model_dir",
            "bertkit.export",
            "bertkit.engines",
            "bertkit.embed",
            "bertkit.evaluation",
            "bertkit.explain",
            "bertkit.baseline",
            "bertkit.bm25",
            "bertkit.mining",
            "bertkit.losses",
            "bertkit.gradcache",
        ],
    ),
    ("training", ["bertkit.train", "bertkit.setfit"]),
    ("serving", ["bertkit.serve"]),
    ("applications: the quickstart, built on the library and imported by none of it", ["bertkit.quickstart"]),
    (
        "entry points: commands, the Python API, old addresses",
        ["bertkit.commands", "bertkit.api", "bertkit.cli", "bertkit.__main__", "bertkit.info", "bertkit.inference_cli"],
    ),
]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", PACKAGE)


def modules(root: str = ROOT) -> dict[str, str]:
    """Module name -> file path, for every .py file of the package."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(folder, name), os.path.dirname(root))[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join(rel)] = os.path.join(folder, name)
    return found


def imports(module: str, path: str, known: set[str], typing: bool = False) -> set[str]:
    """The package modules `module` imports (each subpackage's __init__ on the way included); with `typing`,
    those under `if TYPE_CHECKING:` too."""
    is_package = path.endswith("__init__.py")
    here = module.split(".") if is_package else module.split(".")[:-1]
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    blocks = [] if typing else [block for block in ast.walk(tree) if _type_checking(block)]
    skipped = {id(n) for block in blocks for b in block.body for n in ast.walk(b)}
    targets = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            stem = ".".join(base + (node.module.split(".") if node.module else []))
            for alias in node.names:
                sub = f"{stem}.{alias.name}"
                targets.add(sub if sub in known else stem)
    edges = set()
    for target in targets:
        parts = target.split(".")
        for n in range(2, len(parts) + 1):  # bertkit.a, bertkit.a.b, ... (not the root package)
            name = ".".join(parts[:n])
            inside = module == name or module.startswith(name + ".")  # its own package's __init__ has run
            if name in known and (n == len(parts) or not inside) and name != module:
                edges.add(name)
    return edges


def _type_checking(node: ast.AST) -> bool:
    """An `if TYPE_CHECKING:` (or `if typing.TYPE_CHECKING:`) block."""
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def floor_of(module: str) -> int | None:
    """The FLOORS index of `module`: its own entry, else its nearest package's; None where FLOORS has neither."""
    parts = module.split(".")
    for n in range(len(parts), 0 if module == PACKAGE else 1, -1):  # the root package's entry is for itself only
        name = ".".join(parts[:n])
        for i, (_, names) in enumerate(FLOORS):
            if name in names:
                return i
    return None


def floor_problems(edges: dict[str, set[str]]) -> list[str]:
    """Every module without a floor, and every import from a floor to a higher one."""
    problems = [f"{m}: no floor in FLOORS (bench/import_graph.py)" for m in edges if floor_of(m) is None]
    for module, targets in sorted(edges.items()):
        here = floor_of(module)
        for target in sorted(targets):
            there = floor_of(target)
            if here is not None and there is not None and there > here:
                problems.append(
                    f"{module} (floor {here}: {FLOORS[here][0]}) imports {target} (floor {there}: {FLOORS[there][0]})"
                )
    return problems


def graph(typing: bool = False) -> dict[str, set[str]]:
    """Module -> the modules it imports (`typing`: annotations' imports too)."""
    found = modules()
    known = set(found)
    return {m: imports(m, p, known, typing) for m, p in sorted(found.items())}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main(argv: list[str]) -> int:
    edges = graph()
    if "--edges" in argv:
        for module, targets in edges.items():
            print(f"{module}: {', '.join(sorted(targets)) or '-'}")
    if "--floors" in argv:
        for i, (what, _) in enumerate(FLOORS):
            print(f"floor {i} ({what}): {', '.join(sorted(m for m in edges if floor_of(m) == i))}")
    found, upward = cycles(graph(typing=True)), floor_problems(edges)
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    for problem in upward:
        print("up a floor: " + problem)
    if not found and not upward:
        print(f"no import cycle and no import up a floor among {len(edges)} modules on {len(FLOORS)} floors")
    return 1 if found or upward else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
