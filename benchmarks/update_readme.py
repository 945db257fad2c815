"""Regenerate the README's results tables from recorded bench summaries (never typed by hand).

    python benchmarks/update_readme.py

Reads benchmarks/results/{bench_full,bench_120k,bench_pc_tuned,bench_mixes}/summary.json (those present)
and rewrites the text between <!-- results:start --> and <!-- results:end --> in README.md.
"""
from __future__ import annotations

import json
from pathlib import Path

from rollwise.bench.report import legend, markdown_table

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- results:start -->", "<!-- results:end -->"


def section(path: Path, title: str) -> str:
    s = json.loads(path.read_text())
    out = [f"**{title}** — `{s['command']}`: budget {s['budget_tokens']:,} generated tokens per run, "
           f"{s['seeds']} seeds, pool {s['pool_size']} prompts, held-out {s['eval_size']} prompts.", ""]
    for mix in s["mixes"]:
        out += [f"Mix `{mix}`:", "", markdown_table(s, mix), ""]
    return "\n".join(out)


def main() -> None:
    parts = [legend(), ""]  # once, above the tables it explains
    for name, title in (("bench_full", "Every planner, default mix"),
                        ("bench_120k", "Three times the budget on a 1,000-prompt pool, 11 planners"),
                        ("bench_pc_tuned", "Pilot-Commit with a smaller pilot (documented knobs)"),
                        ("bench_mixes", "Other difficulty mixes")):
        p = ROOT / "benchmarks" / "results" / name / "summary.json"
        if p.exists():
            parts.append(section(p, title))
    readme = ROOT / "README.md"
    text = readme.read_text()
    a, b = text.index(START) + len(START), text.index(END)
    readme.write_text(text[:a] + "\n" + "\n".join(parts) + "\n" + text[b:])
    print(f"updated {readme}")


if __name__ == "__main__":
    main()
