"""Holm over every confirmatory hypothesis of the bench so far, beside each plan's own (issue 47, item 4).

    python benchmarks/bench_holm.py

Each confirmatory record's family (its `summary.json`: the arms it decides and their exact sign-flip p)
joins one family; the bench-wide Holm p grows with every plan, so a verdict that passes its own plan may
not pass here. Records are read in the order of their names; nothing is written.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from rollwise.bench.stats import holm  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def hypotheses(results: Path = RESULTS) -> list[dict]:
    out = []
    for f in sorted(results.glob("*/summary.json")):
        s = json.loads(f.read_text())
        if s.get("kind") != "confirmatory":
            continue
        for arm in s.get("family", []):
            d = s["arms"].get(arm, {})
            out.append({"record": f.parent.name, "arm": arm, "p": d.get("p", 1.0), "p_plan": d.get("p_holm", 1.0),
                        "diff": d.get("primary", {}).get("diff")})
    return out


def bench_wide(results: Path = RESULTS) -> list[dict]:
    """Every confirmatory hypothesis with `p_bench`, Holm over all of them (the family grows with each plan)."""
    hs = hypotheses(results)
    for h, adj in zip(hs, holm([h["p"] for h in hs])):
        h["p_bench"] = float(adj)
    return hs


def main() -> int:
    hs = bench_wide()
    print(f"{len(hs)} confirmatory hypotheses; alpha 0.05\n")
    print("| record | arm | Δ primary | p (sign-flip) | Holm, its plan | Holm, bench-wide |")
    print("|---|---|---|---|---|---|")
    for h in hs:
        print(f"| {h['record']} | {h['arm']} | {h['diff']:+.4f} | {h['p']:.4f} | {h['p_plan']:.4f} | {h['p_bench']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
