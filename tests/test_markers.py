"""The `slow` marker (pyproject.toml) sits on the thirteen slowest core tests, so `-m 'not slow and not heavy'` is
a quick pass and CI's --durations shows whether the list still holds."""
from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def marked(name: str) -> list[str]:
    out = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    ast.unparse(d) == f"pytest.mark.{name}" for d in node.decorator_list):
                out.append(f"{path.name}::{node.name}")
    return out


def test_slow_is_registered_and_marks_thirteen_core_tests():
    opts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in opts["addopts"]  # an unregistered or misspelt marker fails collection
    assert {m.split(":")[0] for m in opts["markers"]} == {"heavy", "slow"}
    slow = marked("slow")
    assert len(slow) == 13 and "test_loop.py::test_kill_and_resume_is_bit_identical" in slow, slow
    assert "test_newcomer_path.py::test_the_newcomer_path_in_docs_tasks_runs_as_written" in slow
    assert not set(slow) & set(marked("heavy"))  # slow ones are core tests: run by default
    assert "test_gpu_budget.py::test_a_tiny_plan_ends_its_runs_on_gpu_seconds_end_to_end" in slow  # issue 41
