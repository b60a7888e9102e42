"""The import graph of the bertkit package, and its cycles (none is the rule).

    python bench/import_graph.py            # every cycle, or "no import cycle among N modules"
    python bench/import_graph.py --edges    # also each module's bertkit imports

Every import counts, at the top of a module or inside a function: a cycle there is a design knot
even when Python's lazy import lets it run. Importing bertkit.a.b also runs bertkit/a/__init__.py,
so that edge counts too, except from inside that package (its __init__ is already running) and for
the root package (every module would reach it).
"""

from __future__ import annotations

import ast
import os
import sys

PACKAGE = "bertkit"
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


def imports(module: str, path: str, known: set[str]) -> set[str]:
    """The package modules `module` imports (each subpackage's __init__ on the way included)."""
    is_package = path.endswith("__init__.py")
    here = module.split(".") if is_package else module.split(".")[:-1]
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    targets = set()
    for node in ast.walk(tree):
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


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {m: imports(m, p, known) for m, p in sorted(found.items())}


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
    found = cycles(edges)
    for component in found:
        print("import cycle: " + " <-> ".join(component))
    if not found:
        print(f"no import cycle among {len(edges)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
