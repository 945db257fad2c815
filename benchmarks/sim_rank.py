"""Does the simulator rank planners as the tiny model does? Spearman correlation of their figures.

    python benchmarks/sim_rank.py [--tiny benchmarks/results/bench_full/summary.json] [--seeds 20]

Runs `rollwise bench --engine sim` (profile `tiny`, fitted by sim_calibrate.py) with every planner of the
recorded tiny-model bench that the simulator can run, on the same protocol (pool, budget, batch, n,
eval_every), then compares the two summaries planner by planner:

  * tokens-to-target ratio against GRPO (the issue's test; goal: Spearman >= 0.8),
  * tokens per useful group (a far less noisy figure),
  * final held-out accuracy at the budget.

A permutation p-value (the share of 20,000 random pairings with a correlation at least as high) says
whether the agreement is more than chance. Correlations are given over every planner both ran and over
the planners *not* used to calibrate the simulator (the out-of-sample test).

How high could any model score? The tiny bench's agreement with itself bounds it: the Spearman between
the figures from two disjoint halves of its seeds (every 3 + 2 split, averaged; pessimistic, as each half
has fewer seeds than the bench) and between two independent bootstrap resamples of its seeds (optimistic,
as the resamples share seeds). Writes benchmarks/results/sim_rank.{json,md} and the
simulator bench's report under benchmarks/results/bench_sim/ (summary, report, plot; not the runs), or
<out>_sim_bench/ beside another --out.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from rollwise.bench.report import load_run, median_ratio, run_figures
from rollwise.cli import main as cli_main
from rollwise.sim.runner import unsupported_reason

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archive import ensure_unpacked  # noqa: E402  (the recorded runs are in their bench's archive)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
FIGURES = {"ratio": "tokens-to-target ratio", "tokens_per_useful_group": "tokens per useful group",
           "final_acc": "final held-out accuracy"}


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged (as Spearman's rho needs)."""
    order = np.argsort(x, kind="mergesort")
    r = np.empty(len(x))
    r[order] = np.arange(len(x), dtype=float)
    for v in np.unique(x):
        tie = x == v
        r[tie] = r[tie].mean()
    return r


def spearman(a, b) -> float:
    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def permutation_p(a, b, n: int = 20_000, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    rho = spearman(a, b)
    b = np.asarray(b, float)
    hits = sum(spearman(a, rng.permutation(b)) >= rho for _ in range(n))
    return (hits + 1) / (n + 1)


def planner_figures(runs: list[list[dict]], base: list[list[dict]], target: float) -> dict:
    """The three figures of one planner from a subset of its runs (and of GRPO's), as report.py computes them."""
    f = [run_figures(r, target) for r in runs]
    b = np.array([run_figures(r, target)["tokens_to_target"] for r in base])
    return {"ratio": median_ratio(b, np.array([x["tokens_to_target"] for x in f])),
            "tokens_per_useful_group": float(np.median([x["tokens_per_useful_group"] for x in f])),
            "final_acc": float(np.mean([x["final_acc"] for x in f]))}


def self_agreement(bench_runs: Path, planners: list[str], seeds: int, target: float, boot: int = 200) -> dict:
    """Spearman of the tiny bench with itself: disjoint seed halves, and independent bootstrap resamples."""
    import itertools

    rng = np.random.default_rng(0)
    runs = {p: [load_run(bench_runs / p.replace("+", "_plus_") / f"seed{s}") for s in range(seeds)] for p in planners}
    base = runs["uniform"]
    out = {}
    for key in FIGURES:
        halves = []
        for a in itertools.combinations(range(seeds), (seeds + 1) // 2):
            b = [s for s in range(seeds) if s not in a]
            fa = [planner_figures([runs[p][s] for s in a], [base[s] for s in a], target)[key] for p in planners]
            fb = [planner_figures([runs[p][s] for s in b], [base[s] for s in b], target)[key] for p in planners]
            halves.append(spearman(fa, fb))
        boots = []
        for _ in range(boot):
            draws = []
            for _ in range(2):
                pick = {p: rng.integers(0, seeds, seeds) for p in planners}
                draws.append([planner_figures([runs[p][s] for s in pick[p]], [base[s] for s in pick["uniform"]],
                                              target)[key] for p in planners])
            boots.append(spearman(*draws))
        out[key] = {"split_half": float(np.nanmean(halves)), "bootstrap": float(np.nanmean(boots))}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", default=str(RESULTS / "bench_full" / "summary.json"))
    ap.add_argument("--seeds", type=int, default=20, help="simulator seeds per planner (runs take < 1 s)")
    ap.add_argument("--calibration", default=str(RESULTS / "sim_calibration.json"),
                    help="the calibration record: its planners are excluded from the out-of-sample figures")
    ap.add_argument("--out", default=str(RESULTS / "sim_rank"))
    args = ap.parse_args()

    tiny = json.loads(Path(args.tiny).read_text())
    tiny_pl = tiny["mixes"]["default"]["planners"]
    planners = [p for p in tiny_pl if unsupported_reason(p) is None]
    left_out = {p: unsupported_reason(p) for p in tiny_pl if p not in planners}
    with tempfile.TemporaryDirectory() as tmp:
        bench_out = Path(tmp) / "bench_sim"
        argv = ["bench", "--engine", "sim", "--planners", ",".join(planners), "--seeds", str(args.seeds),
                "--budget", str(tiny["budget_tokens"]), "--pool-size", str(tiny["pool_size"]),
                "--out", "bench_sim"]
        cwd = os.getcwd()
        os.chdir(tmp)  # the report records `--out bench_sim`, not a temporary path
        try:
            if cli_main(argv) != 0:
                return 1
        finally:
            os.chdir(cwd)
        sim = json.loads((bench_out / "summary.json").read_text())
        # the default record keeps its simulator bench in bench_sim/; another --out beside itself
        out_name = Path(args.out).name
        keep = RESULTS / ("bench_sim" if out_name == "sim_rank" else f"{out_name}_sim_bench")
        shutil.rmtree(keep, ignore_errors=True)
        keep.mkdir(parents=True)
        for f in bench_out.iterdir():
            if f.is_file() and f.name != ".lock":  # the bench's lock on its directory
                shutil.copy(f, keep / f.name)
    sim_pl = sim["mixes"]["default"]["planners"]
    common = [p for p in planners if p in sim_pl]
    calib = Path(args.calibration)
    fitted_on = list(json.loads(calib.read_text())["planners"]) if calib.exists() else []
    held_out = [p for p in common if p not in fitted_on]
    ceiling = self_agreement(ensure_unpacked(Path(args.tiny).parent / "runs") / "default", common, tiny["seeds"],
                             tiny["mixes"]["default"]["target_acc"])
    rows, agreement = [], {}
    for key in FIGURES:
        a = [tiny_pl[p][key] for p in common]
        b = [sim_pl[p][key] for p in common]
        ah = [tiny_pl[p][key] for p in held_out]
        bh = [sim_pl[p][key] for p in held_out]
        agreement[key] = {"spearman": spearman(a, b), "p_value": permutation_p(a, b),
                          "spearman_held_out": spearman(ah, bh), "p_value_held_out": permutation_p(ah, bh),
                          "tiny_self_split_half": ceiling[key]["split_half"],
                          "tiny_self_bootstrap": ceiling[key]["bootstrap"]}
    for p in common:
        rows.append({"planner": p, **{f"tiny_{k}": tiny_pl[p][k] for k in FIGURES},
                     **{f"sim_{k}": sim_pl[p][k] for k in FIGURES},
                     "tiny_ci": [tiny_pl[p]["ci_low"], tiny_pl[p]["ci_high"]],
                     "sim_ci": [sim_pl[p]["ci_low"], sim_pl[p]["ci_high"]]})
    record = {"command": "python benchmarks/sim_rank.py " + " ".join(sys.argv[1:]),
              "tiny_summary": str(Path(args.tiny).resolve().relative_to(ROOT)) if str(Path(args.tiny).resolve()).startswith(str(ROOT)) else args.tiny,
              "tiny_seeds": tiny["seeds"], "sim_seeds": args.seeds, "planners": common, "left_out": left_out,
              "calibration_planners": fitted_on, "held_out_planners": held_out,
              "agreement": agreement, "rows": rows}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2))
    out.with_suffix(".md").write_text(markdown(record))
    print(json.dumps({"agreement": agreement, "planners": len(common)}))
    return 0


def _r(x: float) -> str:
    return "not reached" if x == 0 else ("inf" if np.isinf(x) else f"{x:.2f}")


def markdown(rec: dict) -> str:
    ag = rec["agreement"]
    lines = ["# Simulator vs tiny model: do they rank the planners alike?\n",
             f"Command: `{rec['command']}`\n",
             f"Tiny model: `{rec['tiny_summary']}` ({rec['tiny_seeds']} seeds). Simulator: `rollwise bench --engine sim` "
             f"with the fitted `tiny` profile, the same protocol, {rec['sim_seeds']} seeds. "
             f"{len(rec['planners'])} planners in both; not in the simulator: "
             + "; ".join(f"{p} ({why.split(': ', 1)[-1].split('.')[0]})" for p, why in rec["left_out"].items()) + ".\n",
             f"Calibrated on {', '.join(rec['calibration_planners']) or 'nothing'}; out of sample: the other "
             f"{len(rec['held_out_planners'])}.\n",
             "| figure | Spearman ρ, all (p) | ρ, out of sample (p) | tiny bench vs itself: seed halves / bootstrap |",
             "|---|---|---|---|"]
    lines += [f"| {FIGURES[k]} | {v['spearman']:.2f} ({v['p_value']:.3f}) | {v['spearman_held_out']:.2f} "
              f"({v['p_value_held_out']:.3f}) | {v['tiny_self_split_half']:.2f} / {v['tiny_self_bootstrap']:.2f} |"
              for k, v in ag.items()]
    lines += ["", "| planner | tiny ratio [CI] | sim ratio [CI] | tiny tokens/useful group | sim tokens/useful group | "
              "tiny final acc | sim final acc |", "|---|---|---|---|---|---|---|"]
    for r in sorted(rec["rows"], key=lambda r: -r["sim_ratio"]):
        lines.append(f"| {r['planner']} | {_r(r['tiny_ratio'])} [{r['tiny_ci'][0]:.2f}, {r['tiny_ci'][1]:.2f}] | "
                     f"{_r(r['sim_ratio'])} [{r['sim_ci'][0]:.2f}, {r['sim_ci'][1]:.2f}] | "
                     f"{r['tiny_tokens_per_useful_group']:.1f} | {r['sim_tokens_per_useful_group']:.1f} | "
                     f"{r['tiny_final_acc']:.3f} | {r['sim_final_acc']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
