"""Calibrate the simulator against the tiny model's runs and record the fit.

    python benchmarks/sim_calibrate.py [--bench benchmarks/results/bench_full/runs/default]
                                       [--planners uniform,dapo,oracle] [--n-random 100] [--n-local 400]
                                       [--write-profile] [--fresh]

Reads the real runs' metrics.jsonl (the recorded full bench: pool 300, batch 32, n 8, 40k tokens) of the
calibration planners (GRPO plus two whose batches carry more signal per step), fits the parameters in
rollwise.sim.calibrate.SPACE, then scores the fit on 10 fresh simulator seeds and writes
benchmarks/results/sim_calibration.{json,md,png}. The other planners are left for the test of the fit
(benchmarks/sim_rank.py). With --write-profile it also writes the
fitted values into rollwise/sim/profiles.py (TINY_FIT), which `rollwise bench --engine sim` uses.
"""
from __future__ import annotations

import argparse
import glob
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from rollwise.sim import calibrate as cal

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archive import ensure_unpacked  # noqa: E402
from rollwise.sim.profiles import profile_configs

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=str(RESULTS / "bench_full/runs/default"))
    ap.add_argument("--planners", default="uniform,dapo,oracle", help="calibration planners")
    ap.add_argument("--n-random", type=int, default=100)
    ap.add_argument("--n-local", type=int, default=400)
    ap.add_argument("--seeds", type=int, default=4, help="simulator seeds per candidate")
    ap.add_argument("--write-profile", action="store_true")
    ap.add_argument("--fresh", action="store_true", help="do not start the search from the current `tiny` profile")
    ap.add_argument("--out", default=str(RESULTS / "sim_calibration"))
    args = ap.parse_args()

    proto = cal.Protocol()
    planners = [p.strip() for p in args.planners.split(",") if p.strip()]
    ensure_unpacked(Path(args.bench))  # the recorded runs are in their bench's archive
    dirs = {p: sorted(glob.glob(str(Path(args.bench) / p.replace("+", "_plus_") / "seed*"))) for p in planners}
    reals = {p: cal.real_targets([Path(d) for d in ds], proto) for p, ds in dirs.items()}
    t0 = time.perf_counter()
    start = None
    if not args.fresh:  # start from the current profile's values of the fitted parameters
        pop, dyn, _ = profile_configs("tiny")
        start = {(sec, name): getattr(pop if sec == "population" else dyn, name) for sec, name in cal.SPACE}
    params = cal.fit(reals, proto, args.n_random, args.n_local, args.seeds, start=start,
                     log=lambda m: print(m, file=sys.stderr, flush=True))
    fit_s = time.perf_counter() - t0
    err, per = cal.planners_error(reals, cal.from_dotted(params), proto, list(range(10)))  # fresh seeds
    rel = lambda d: str(Path(d).relative_to(ROOT)) if d.startswith(str(ROOT)) else d  # noqa: E731
    record = {"command": "python benchmarks/sim_calibrate.py " + " ".join(sys.argv[1:]),
              "real_runs": {p: [rel(d) for d in ds] for p, ds in dirs.items()},
              "protocol": proto.__dict__, "params": params, "error": err,
              "planners": {p: {"error": e, "error_by_target": parts, "real": reals[p], "sim": sim}
                           for p, (e, parts, sim) in per.items()},
              "fit_seconds": round(fit_s, 1),
              "candidates": args.n_random + args.n_local, "sim_seeds_per_candidate": args.seeds}
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2))
    out.with_suffix(".md").write_text(markdown(record))
    plot(record, out.with_suffix(".png"))
    if args.write_profile:
        write_profile(params)
    print(json.dumps({"params": params, "error": err,
                      "by_planner": {p: round(d["error"], 3) for p, d in record["planners"].items()}}))
    return 0


def _row(name, real, sim, i, fmt="{:.3f}"):
    return (f"| {name} | {fmt.format(real['mean'][i])} ± {fmt.format(real['se'][i])} | "
            f"{fmt.format(sim['mean'][i])} ± {fmt.format(sim['se'][i])} |")


def markdown(rec: dict) -> str:
    first = next(iter(rec["planners"].values()))
    lines = ["# Simulator calibration against the tiny model's runs\n",
             f"Command: `{rec['command']}`\n",
             f"Real runs: the recorded bench protocol (pool {rec['protocol']['pool_size']}, batch "
             f"{rec['protocol']['batch']}, n {rec['protocol']['n']}, {rec['protocol']['budget_tokens']} tokens), "
             f"{first['real']['seeds']} seeds of each calibration planner: "
             + ", ".join(f"`{p}`" for p in rec["planners"]) + ". Simulator: profile `tiny` with the fitted "
             "parameters below, 10 seeds not used in the fit. Zero-variance persistence comes from the real runs "
             "that logged it (pooled over those seeds).\n",
             f"Fit: {rec['candidates']} candidates × {rec['sim_seeds_per_candidate']} simulator seeds × "
             f"{len(rec['planners'])} planners in {rec['fit_seconds']} s.\n",
             f"**Error** (mean of ((sim − real) / se)² over every point, se = the real runs' seed standard error, "
             f"floored): **{rec['error']:.2f}** overall; "
             + "; ".join(f"{p} {d['error']:.2f} ({', '.join(f'{k} {v:.1f}' for k, v in d['error_by_target'].items())})"
                         for p, d in rec["planners"].items())
             + ". About 1 means the simulator sits within the real runs' own noise.\n",
             "## Fitted parameters\n", "| parameter | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rec["params"].items()]
    for planner, d in rec["planners"].items():
        real, sim = d["real"], d["sim"]
        lines += ["", f"## `{planner}`: real (mean ± se over seeds) vs simulator\n",
                  "| figure | real | simulator |", "|---|---|---|"]
        for i, st in enumerate(real["eval_steps"]):
            if st in sim["eval_steps"]:
                j = sim["eval_steps"].index(st)
                lines.append(f"| held-out acc, step {st} | {real['eval']['mean'][i]:.3f} ± {real['eval']['se'][i]:.3f} | "
                             f"{sim['eval']['mean'][j]:.3f} ± {sim['eval']['se'][j]:.3f} |")
        for key, label in (("zv", "zero-variance frac, step bin"), ("reward", "train reward, step bin")):
            for i in range(len(real[key]["mean"])):
                lines.append(_row(f"{label} {i + 1}/{len(real[key]['mean'])}", real[key], sim[key], i))
        if "persist" in real:
            lines.append(_row("ZV prompt stays ZV at next visit", real["persist"], sim["persist"], 0))
        lines.append(_row("generated tokens per step", real["tokens"], sim["tokens"], 0, "{:.0f}"))
    lines.append("\n![fit](sim_calibration.png)\n")
    return "\n".join(lines) + "\n"


def plot(rec: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = len(rec["planners"])
    fig, ax = plt.subplots(k, 3, figsize=(14, 3.6 * k), squeeze=False)
    for row, (planner, d) in zip(ax, rec["planners"].items()):
        for side, s, style in (("tiny model", d["real"], "o-"), ("simulator", d["sim"], "s--")):
            row[0].errorbar(s["eval_steps"], s["eval"]["mean"], s["eval"]["se"], fmt=style, label=side, capsize=3)
            x = np.arange(1, len(s["zv"]["mean"]) + 1)
            row[1].errorbar(x, s["zv"]["mean"], s["zv"]["se"], fmt=style, label=side, capsize=3)
            row[2].errorbar(x, s["reward"]["mean"], s["reward"]["se"], fmt=style, label=side, capsize=3)
        row[0].set(xlabel="step", ylabel="held-out accuracy (greedy)", title=f"{planner}: accuracy")
        row[1].set(xlabel="step bin", ylabel="zero-variance fraction", title=f"{planner}: zero-variance groups")
        row[2].set(xlabel="step bin", ylabel="mean train reward (T=1)", title=f"{planner}: train reward")
        for a in row:
            a.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def write_profile(params: dict) -> None:
    path = ROOT / "src" / "rollwise" / "sim" / "profiles.py"
    text = path.read_text()
    pop = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith("population.")}
    dyn = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith("dynamics.")}
    block = f'TINY_FIT = {{\n    "population": {pop!r},\n    "dynamics": {dyn!r},\n}}'
    new, k = re.subn(r"TINY_FIT = \{\n.*?\n\}", block.replace("'", '"'), text, flags=re.S)
    if k != 1:
        raise RuntimeError("could not find the TINY_FIT block in profiles.py")
    path.write_text(new)
    print(f"wrote the fitted parameters into {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
