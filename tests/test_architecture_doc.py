"""docs/architecture.md stays true: every file it names exists, and its table of subpackage imports is the
import graph tests/test_import_graph.py reads from the code."""
from __future__ import annotations

import re
from pathlib import Path

from test_import_graph import subpackage_edges

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "rollwise"
DOC = (ROOT / "docs" / "architecture.md").read_text()


def test_every_file_the_tree_names_exists():
    tree = DOC.split("```")[1]  # the first block: src/rollwise/'s tree, one package a line (and its continuations)
    missing, package = [], None
    for line in tree.splitlines()[1:]:
        head = re.match(r"  (\S+)/ ", line)
        if head:
            package = head.group(1)
            if not (SRC / package).is_dir():
                missing.append(package + "/")
        missing += [f"{package}/{f}" for f in re.findall(r"\b\w+\.py\b", line) if not (SRC / package / f).exists()]
    assert package == "testing" and not missing, missing


def test_every_path_the_text_names_exists():
    text = "".join(b for i, b in enumerate(DOC.split("```")) if i != 1)
    named = set(re.findall(r"\b([\w.]+/[\w./]+\.(?:py|md))\b", text)) | set(re.findall(r"\]\(([\w.-]+\.md)\)", text))
    missing = [p for p in sorted(named) if not any((base / p).exists() for base in (ROOT, SRC, ROOT / "docs"))]
    assert "run/driver.py" in named and not missing, missing


def test_the_import_table_is_the_import_graph():
    drawn = {}
    for package, cell in re.findall(r"^\| (\w+) \| ([^|]+) \|$", DOC, re.M):
        if package != "package":
            drawn[package] = set(re.findall(r"\b[a-z]+\b", cell.split("(")[0])) & {p.name for p in SRC.iterdir()}
    actual = {}
    for a, b in subpackage_edges():
        if b != "core":
            actual.setdefault(a, set()).add(b)
    assert {k: v for k, v in drawn.items() if v} == actual
