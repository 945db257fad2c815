"""The README stays short and its generated parts match the records; the docs pages generated from the
code match it; the README's first two commands stay exactly what a fresh clone runs."""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_short_and_its_results_slot_is_what_update_readme_writes():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 250
    update = load("benchmarks/update_readme.py")
    for path, rendered in update.rendered().items():
        assert path.read_text() == rendered, f"{path.name} is stale: run python benchmarks/update_readme.py"
    for slot in ("## The two commands", "## A first run, explained", "## Results", "## Where to go next"):
        assert slot in text


def test_earlier_benches_label_the_task2_composition_exploratory():
    update = load("benchmarks/update_readme.py")
    rows = {line.split("|")[2].strip(): line for line in update.earlier_benches().splitlines() if line.startswith("| 2 (chain)")}
    assert "exploratory" in rows["`arrol r3+duet-abort`"] and "2.56 [1.63, 3.36]" in rows["`arrol r3+duet-abort`"]
    assert "exploratory" not in rows["`duet-abort`"]


def test_readme_verdicts_come_from_complete_confirmatory_records_only(tmp_path, monkeypatch):
    update = load("benchmarks/update_readme.py")

    def arm(diff, paired, fam=True, holm=0.01, verdict="higher"):
        return {"planner": "ar3po", "in_family": fam, "seeds_paired": paired, "p_holm": holm, "verdict": verdict,
                "primary": {"diff": diff, "lo": diff - 0.01, "hi": diff + 0.01}, "goal_met": False,
                "goal": {"ratio": 1.5, "lo": 1.1, "hi": 2.0, "tokens_planner": 10.0},
                "rows_per_group": 5.7, "rows_per_group_base": 4.0}

    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "summary.json").write_text(json.dumps(
        {"kind": "confirmatory", "seeds": [1000, 1001], "family": ["a"],
         "arms": {"a": {**arm(0.02, 2), "p": 0.005}, "b": arm(0.03, 2, fam=False)}}))
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "summary.json").write_text(json.dumps(
        {"kind": "confirmatory", "seeds": [1000, 1001], "family": ["a"], "arms": {"a": arm(0.02, 1)}}))
    monkeypatch.setattr(update, "RESULTS", tmp_path)
    monkeypatch.setattr(update, "CONFIRMATORY", (("done", "p1.yaml", "T1"), ("half", "p2.yaml", "T2"),
                                                 ("absent", "p3.yaml", "T3")))
    text = update.verdicts()
    rows = [line for line in text.splitlines() if line.startswith("| T")]
    # the family arm first, then the described one; the half-done and absent records give no row
    assert [r.split("|")[2].strip() for r in rows] == ["a", "b"]
    # bench-wide Holm over every confirmatory hypothesis in RESULTS: done's a (p 0.005) and half's a (no p yet:
    # 1), so 0.005 x 2 = 0.0100 beside its plan's own; b is outside its plan's family: no bench-wide p
    assert "+0.0200 [+0.0100, +0.0300] | 0.0100 | 0.0100 | higher | 1.50 [1.10, 2.00] | no | 5.7 (4.0) | 2 |" in rows[0]
    assert "| 0.0100 | — | higher |" in rows[1]
    assert "- T2: `p2.yaml` (committed before its runs) is running" in text and "- T3: `p3.yaml`" in text


def test_readme_keeps_the_two_commands_a_fresh_clone_runs():
    import re

    text = (ROOT / "README.md").read_text()
    block = text.split("## The two commands", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]  # timings may change
    assert commands == ["bash scripts/setup.sh && .venv/bin/rollwise bench --quick --out bench-out",
                        "bash scripts/setup.sh && .venv/bin/python -m pytest -q"]
    assert re.search(r"# 2\. Set up, then run the tests \(~[0-9–]+ min\)", block)


def test_readme_links_to_docs_pages_that_exist():
    import re

    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links and all((ROOT / link).exists() for link in links), [l for l in links if not (ROOT / l).exists()]


def test_generated_docs_pages_match_the_code():
    sys.path.insert(0, str(ROOT / "src"))
    gen = load("scripts/gen_docs.py")
    for path, text in gen.rendered().items():
        assert path.read_text() == text, f"{path.name} is stale: run python scripts/gen_docs.py"


def test_methods_page_lists_every_registered_component():
    from rollwise.core import registry

    page = (ROOT / "docs" / "methods.md").read_text()
    for kind in registry.KINDS:
        for e in registry.entries(kind):
            assert f"| `{e.name}` | {e.provenance} |" in page, (kind, e.name)


@pytest.mark.skipif(shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None,
                    reason="the docs extra is not installed (CI's docs stage installs it)")
def test_the_site_builds_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    out = subprocess.run([mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin",
                                                              "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]


def test_sync_checks_without_writing_and_writes_only_stale_pages(tmp_path, capsys):
    from rollwise.core.generated import between, sync

    page = tmp_path / "page.md"
    page.write_text("a\n<!-- b -->\nold\n<!-- e -->\nz\n")
    new = between(page.read_text(), "<!-- b -->", "<!-- e -->", "new")
    assert new == "a\n<!-- b -->\n\nnew\n\n<!-- e -->\nz\n"
    assert sync({page: new}, tmp_path, check=True, command="regen") == 1
    assert "stale: page.md; run regen" in capsys.readouterr().err and "old" in page.read_text()
    assert sync({page: new}, tmp_path, check=False, command="regen") == 0 and page.read_text() == new
    assert sync({page: new}, tmp_path, check=True, command="regen") == 0


def test_the_help_and_the_synopses_list_every_registered_task():
    """`train --help`, the README's synopsis and docs/usage.md name every registered task (issue 48: they
    listed three of six)."""
    import re
    import subprocess
    import sys

    from rollwise.core import registry

    names = [e.name for e in registry.entries("task")]
    root = Path(__file__).parents[1]
    for doc in ("README.md", "docs/usage.md"):
        synopsis = re.search(r"\[--task ([^\]]+)\]", (root / doc).read_text()).group(1).split("|")
        assert set(names) <= set(synopsis), (doc, set(names) - set(synopsis))
    out = subprocess.run([sys.executable, "-m", "rollwise.cli", "train", "--help"], capture_output=True, text=True).stdout
    assert all(n in " ".join(out.split()).replace("- ", "-") for n in names), out
