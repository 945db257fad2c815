"""The spread of a base's warm-start outcomes over seeds (WAVE3: 3 warm-start seeds per new base).

Collect: each base directory's `build.json` (recipe, fingerprint, seconds) and `report.json` (greedy
validation accuracy, per-level accuracies, train-pool groups of 8 samples all wrong / mixed / all right)
go into one JSON record, keyed by a label:

    python benchmarks/base_spread.py collect OUT.json "seed 0 (shipped)=src/rollwise/assets/bases/remainder-llama" \
        "seed 1=/tmp/base_s1" "seed 2=/tmp/base_s2"

Table: the markdown table of a record, with the mean and s.d. over its seeds, recomputed from the record:

    python benchmarks/base_spread.py table benchmarks/results/testbed_search/base_spread.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

# The report's figures a spread keeps (the per-level accuracies too, whatever levels the task has).
KEEP = ("eval_acc", "eval_se", "eval_len_mean", "eval_truncated_frac",
        "pool_all_correct", "pool_all_wrong", "pool_mixed")


def entry(base: Path) -> dict:
    """One base's record: what built it and what its report measured."""
    for name in ("build.json", "report.json"):
        if not (base / name).is_file():
            raise SystemExit(f"base_spread: {base / name} is missing (is {base} a base built by rollwise warmstart?)")
    build = json.loads((base / "build.json").read_text())
    report = json.loads((base / "report.json").read_text())
    out = {"command": build.get("command"), "warmstart": build["warmstart"],
           "fingerprint": build["fingerprint"], "seconds": build.get("seconds")}
    out.update({k: report[k] for k in report if k in KEEP or k.startswith("eval_acc_L")})
    return out


def collect(out: Path, pairs: list[str]) -> dict:
    if out.exists():  # a record is never overwritten
        raise SystemExit(f"base_spread: {out} exists; remove it or write elsewhere")
    record = {}
    for pair in pairs:
        label, sep, path = pair.partition("=")
        if not sep or not label or not path:
            raise SystemExit(f"base_spread: {pair!r} is not LABEL=BASE_DIR")
        if label in record:
            raise SystemExit(f"base_spread: label {label!r} is given twice")
        record[label] = entry(Path(path))
    out.write_text(json.dumps(record, indent=1) + "\n")
    return record


def table(record: dict) -> str:
    rows = ["| warm-start seed | greedy (validation) | pool groups all wrong / mixed / all right | build (s, wall) |",
            "|---|---:|---|---:|"]
    for label, e in record.items():
        rows.append(f"| {label} | {e['eval_acc']:.3f} | {e['pool_all_wrong']:.3f} / {e['pool_mixed']:.3f} / "
                    f"{e['pool_all_correct']:.3f} | {e['seconds']:.0f} |")
    acc = np.array([e["eval_acc"] for e in record.values()])
    zero = np.array([e["pool_all_wrong"] + e["pool_all_correct"] for e in record.values()])
    rows.append("")
    sd = f"{acc.std(ddof=1):.3f}" if len(acc) > 1 else "n/a"
    rows.append(f"greedy: mean {acc.mean():.3f}, s.d. {sd}, range {acc.min():.3f}-{acc.max():.3f}; "
                f"zero-variance pool groups: {zero.min():.1%}-{zero.max():.1%} ({len(acc)} seeds)")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="write a spread record from base directories")
    c.add_argument("out", type=Path)
    c.add_argument("bases", nargs="+", help="LABEL=BASE_DIR")
    t = sub.add_parser("table", help="print a spread record's table with mean and s.d.")
    t.add_argument("record", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "collect":
        print(table(collect(args.out, args.bases)))
    else:
        try:
            record = json.loads(args.record.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SystemExit(f"base_spread: cannot read {args.record}: {e}")
        print(table(record))


if __name__ == "__main__":
    sys.exit(main())
