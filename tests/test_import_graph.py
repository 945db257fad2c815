"""The import graph between rollwise's subpackages, lazy imports (inside functions) included, as
docs/architecture.md draws it: no cycle except through the edges listed in KNOWN (each with why it is
there and what removes it) and the registry's plugin loading (core/registry.py imports every package that
registers something, so that a name resolves)."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "rollwise"

# edges that close a cycle today, to be removed (issue 44, "layer edges the wrong way"); a new one fails
KNOWN = {
    ("run", "bench"),  # run/budget.py, run/config.py read cost profiles (bench/costs.py): a run-time concept
    ("policy", "run"),  # policy/warmstart.py evaluates and policy/export.py loads through run/
    ("policy", "generate"),  # policy/warmstart.py samples with the torch engine for its evaluations
    ("sim", "bench"),  # sim/bench.py reads bench/runner.py's eval_tokens
}
PLUGINS = ("core/registry.py",)  # the registry's plugin loading


def subpackage_edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) subpackage -> the files that make the edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if len(rel.parts) < 2 or str(rel) in PLUGINS:
            continue  # top-level modules (cli.py) sit above every subpackage
        me = rel.parts[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level == 0 and (node.module or "").startswith("rollwise."):
                    targets = [node.module.split(".")[1]]
                elif node.level == 0 and node.module == "rollwise":
                    targets = [a.name for a in node.names]
                elif node.level >= 2 and node.module:
                    targets = [node.module.split(".")[0]] if node.level == 2 else []
                elif node.level >= 2:
                    targets = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".")[1] for a in node.names if a.name.startswith("rollwise.")]
            for t in targets:
                if t != me and (SRC / t).is_dir():
                    edges.setdefault((me, t), []).append(str(rel))
    return edges


def cycles(edges) -> list[list[str]]:
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    found, seen = [], set()

    def walk(node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cyc = path[path.index(nxt):] + [nxt]
                key = frozenset(zip(cyc, cyc[1:]))
                if key not in seen:
                    seen.add(key)
                    found.append(cyc)
            elif len(path) < len(graph) + 1:
                walk(nxt, path + [nxt])

    for start in sorted(graph):
        walk(start, [start])
    return found


def test_no_cycle_between_subpackages_beyond_the_known_edges():
    edges = subpackage_edges()
    assert ("run", "core") in edges and ("control", "core") in edges  # the walk sees relative imports
    left = [c for c in cycles(set(edges) - KNOWN)]
    assert not left, "import cycles between subpackages: " + "; ".join(
        " -> ".join(c) + " (" + ", ".join(sorted({f for a, b in zip(c, c[1:]) for f in edges[(a, b)]})) + ")"
        for c in left)


def test_the_known_edges_still_exist():
    """A known edge that is gone is taken off the list (and docs/architecture.md's graph)."""
    edges = subpackage_edges()
    assert not [e for e in KNOWN if e not in edges], [e for e in KNOWN if e not in edges]


def test_the_framework_imports_no_component_module():
    """control/base.py, run/, generate/engine.py and the host adapters import no planner component's module
    (they compose from declared capabilities)."""
    components = {p.stem for p in (SRC / "control").glob("*.py")} - {"__init__", "base", "capabilities", "partial"}
    components |= {p.stem for p in (SRC / "replay").glob("*.py")} - {"__init__"}
    framework = [SRC / "control" / "base.py", SRC / "generate" / "engine.py", *sorted((SRC / "run").glob("*.py")),
                 *sorted((SRC / "integrations").glob("*.py"))]
    bad = []
    for path in framework:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module.split(".")[-1] in components and ("control" in node.module or "replay" in node.module
                                                                 or node.level == 1 and path.parent.name == "control"):
                    bad.append(f"{path.relative_to(SRC)}: {node.module}")
    assert not bad, bad
