"""Regenerate the README's results tables from recorded bench summaries (never typed by hand).

    python benchmarks/update_readme.py

Reads benchmarks/results/bench2/summary.json and bench2_long/summary.json (Bench 2.0 and its long bench, on
the shipped base) and rewrites the text between <!-- results:start --> and <!-- results:end --> in README.md.
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
    # the earlier benches (bench_full, bench_120k, bench_mixes, bench_pc_tuned) ran on a base that cannot
    # be rebuilt; their reports stay in benchmarks/results/ as records, out of the README
    for name, title in (("bench2", "Bench 2.0: GRPO, the oracle and the other planners, 8 seeds each, on the shipped base"),
                        ("bench2_long", "The long bench: 120,000 tokens, a pool of 1,000 prompts, 8 seeds each, on the "
                                        "shipped base")):
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
