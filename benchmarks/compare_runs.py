"""Compare recorded runs field by field: does a change move results?

    python benchmarks/compare_runs.py BEFORE_DIR AFTER_DIR [--ignore wall_s,gen_s] [--out report.md]

BEFORE_DIR and AFTER_DIR are bench outputs (`<dir>/runs/<mix>/<planner>/seed<k>/metrics.jsonl`) or single
run directories. Every run present in both is compared row by row on the fields both have (wall-time
fields aside); fields only one side has are listed, never compared. A run is EQUAL when every shared
field of every row is equal (floats exactly, NaN equal to NaN).
"""
from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

from rollwise.run.records import rows as metrics_rows

TIMING = {"wall_s", "gen_s"}


def rows(path: Path) -> list[dict]:
    return metrics_rows(path)


def same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def compare(before: Path, after: Path, ignore=TIMING) -> dict:
    """{'equal', 'rows', 'moved': Counter(field -> rows where it differs), 'first': first difference,
    'only_before', 'only_after'}."""
    a, b = rows(before), rows(after)
    moved, first = Counter(), None
    only_a, only_b = set(), set()
    for x, y in zip(a, b):
        only_a |= set(x) - set(y)
        only_b |= set(y) - set(x)
        for k in set(x) & set(y) - set(ignore):
            if not same(x[k], y[k]):
                moved[k] += 1
                if first is None:
                    first = f"step {x.get('step')} {k}: {x[k]!r} -> {y[k]!r}"
    return {"equal": not moved and len(a) == len(b), "rows": (len(a), len(b)), "moved": moved, "first": first,
            "only_before": sorted(only_a), "only_after": sorted(only_b)}


def run_files(root: Path) -> dict[str, Path]:
    if (root / "metrics.jsonl").exists():
        return {".": root / "metrics.jsonl"}
    return {str(p.parent.relative_to(root)): p for p in sorted(root.glob("runs/*/*/seed*/metrics.jsonl"))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--ignore", default=",".join(sorted(TIMING)), help="fields never compared")
    ap.add_argument("--out", help="write the table as markdown here too")
    args = ap.parse_args(argv)
    fa, fb = run_files(args.before), run_files(args.after)
    common = sorted(set(fa) & set(fb))
    if not common:
        print(f"no run present in both {args.before} and {args.after}", file=sys.stderr)
        return 2
    lines = ["| run | rows | result | fields that moved (rows) | first difference |", "|---|---|---|---|---|"]
    added = set()
    for key in common:
        r = compare(fa[key], fb[key], set(args.ignore.split(",")))
        added |= set(r["only_after"])
        moved = ", ".join(f"{k} ({n})" for k, n in sorted(r["moved"].items())) or "-"
        lines.append(f"| {key} | {r['rows'][0]} / {r['rows'][1]} | {'EQUAL' if r['equal'] else 'MOVED'} | "
                     f"{moved[:300]} | {(r['first'] or '-')[:120]} |")
    lines.append(f"\nFields only the second side writes (not compared): {', '.join(sorted(added)) or 'none'}.")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
