"""How many seeds a preregistered plan needs: a power calculation on a recorded bench's variance.

    OMP_NUM_THREADS=1 python benchmarks/power_seeds.py [RESULTS_DIR ...] [--alpha 0.05] [--power 0.8]

For every planner of a recorded bench (default: benchmarks/results/bench2, task 1, and
benchmarks/results/generate3_8seeds, task 2), the per-seed paired differences against GRPO (`uniform`)
of mean held-out accuracy over the token budget (the recorded headline; Bench 3.0 reads the same figure
over compute) give an effect (|mean|) and a per-seed s.d.; bench/stats.py `seeds_needed` then finds the
fewest seeds with which the exact two-sided sign-flip test passes Holm at alpha with that power, for
the family size m the bench compared (planners - 1) and for m = 3 (a focused confirmatory family).
Results go to benchmarks/results/power_seeds.json and .md.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))
from archive import ensure_unpacked  # noqa: E402

from rollwise.bench import stats  # noqa: E402
from rollwise.bench.report import load_run  # noqa: E402

DEFAULT = [HERE / "results" / "bench2", HERE / "results" / "generate3_8seeds"]


def planner_diffs(results: Path) -> tuple[int, dict[str, np.ndarray]]:
    summary = json.loads((results / "summary.json").read_text())
    budget = float(summary["budget_tokens"])
    runs = ensure_unpacked(results / "runs") / "default"  # the raw runs are in the bench's archive
    seeds = sorted(int(p.name[4:]) for p in (runs / "uniform").iterdir())
    auc = {}
    for d in sorted(runs.iterdir()):
        vals = []
        for s in seeds:
            rows = load_run(d / f"seed{s}")
            vals.append(stats.auc(rows, budget) if rows else np.nan)
        auc[d.name] = np.array(vals)
    base = auc.pop("uniform")
    return len(seeds), {p: v - base for p, v in auc.items() if p != "oracle"}  # the oracle is off-budget


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="*", default=[str(p) for p in DEFAULT])
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--power", type=float, default=0.8)
    ap.add_argument("--sims", type=int, default=1000)
    args = ap.parse_args(argv)
    out = {"alpha": args.alpha, "power": args.power, "sims": args.sims, "benches": {}}
    md = [f"# Seeds a preregistered plan needs (power {args.power}, alpha {args.alpha}, exact sign-flip + Holm)\n",
          "Command: `OMP_NUM_THREADS=1 python benchmarks/power_seeds.py`. Effect = the mean paired difference of mean "
          "held-out accuracy over the budget against GRPO (its size is what the two-sided test needs); s.d. = per-seed s.d. of the differences; seeds: the fewest "
          "with which the exact test passes Holm with that power (— : more than 16).\n"]
    for r in args.results:
        r = Path(r)
        n, diffs = planner_diffs(r)
        m_all = len(diffs)
        rows = {}
        md += [f"## {r.name} ({n} seeds recorded; family of all {m_all} non-oracle planners, and of 3)\n",
               f"| planner | mean difference (signed) | s.d. | seeds (m = {m_all}) | seeds (m = 3) |", "|---|---|---|---|---|"]
        for p, d in sorted(diffs.items(), key=lambda kv: -abs(np.nanmean(kv[1]))):
            d = d[np.isfinite(d)]
            mean, sd = float(d.mean()), float(d.std(ddof=1))
            eff = abs(mean)
            a = stats.seeds_needed(eff, sd, m_all, args.alpha, args.power, sims=args.sims)
            b = stats.seeds_needed(eff, sd, 3, args.alpha, args.power, sims=args.sims)
            rows[p] = {"mean_diff": mean, "effect": eff, "sd": sd, "seeds_family_all": a["seeds"], "seeds_family_3": b["seeds"],
                       "min_seeds_all": a["min_seeds"], "min_seeds_3": b["min_seeds"]}
            md.append(f"| {p} | {mean:+.4f} | {sd:.4f} | {a['seeds'] or '—'} | {b['seeds'] or '—'} |")
        md.append("")
        out["benches"][r.name] = {"seeds_recorded": n, "family_all": m_all, "planners": rows}
    (HERE / "results" / "power_seeds.json").write_text(json.dumps(out, indent=2) + "\n")
    (HERE / "results" / "power_seeds.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
