"""Synchronous vs asynchronous (Ray workers, staleness bound S) vs partial rollouts (APRIL), side by side.

Every arm is a `rollwise bench` of GRPO (`uniform`) on the same task, seeds, base and budget (the
task's bench defaults unless given: on `chain` 400,000 tokens, pool 300, 200 held-out prompts), one bench
directory per arm under --out:

    sync                  rollwise bench --planners uniform
    async S=0             ... --set mode=async --set workers=2 --set max_staleness=0   (one run at a time)
    async S=1, async S=2  ... --set mode=async --set workers=2 --set max_staleness=S   (one run at a time)
    partial (APRIL 1.5x)  ... --planners uniform+april --set planner_options.april.overprovision=1.5

    python benchmarks/async_bench.py --task chain --seeds 5 --out benchmarks/results/async_chain5

Then each arm against the synchronous loop, paired by seed, with the bench's statistics
(rollwise/bench/stats.py): mean held-out accuracy over the budget (the headline), accuracy at the
budget, tokens-to-target, and wall-to-target (the same ratio read on the training wall-clock axis:
`wall_s`, evaluations and checkpoints excluded in both loops); plus tokens by fate (carried, aborted),
the staleness histogram (steps by their largest lag) and the seconds per step.

What it can and cannot show on 2 cores: a synchronous run uses one core (`OMP_NUM_THREADS=1`, two runs at
once); an async run has both cores to itself, for its learner and two Ray workers. The S = 0 arm runs the
same workers on-policy, so S = 1, 2 against it is what overlapping generation with learning buys, and it
against sync is what two workers buy. Neither is a cluster, where generation and training run on
separate devices (the simulator's timing model, benchmarks/sim_async.py, gives that figure). What it does
show: whether rollouts up to S versions stale learn as well per token as fresh ones, and what partial
rollouts charge as aborted and carried.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from rollwise.run.records import rows as metrics_rows

import numpy as np

from rollwise.bench.stats import (acc_at, auc, paired_difference, tokens_to_target_ratio, verdict)

ARMS = {  # name -> (directory, planner, extra `rollwise bench` arguments, runs at once)
    "sync": ("sync", "uniform", [], None),
    # the async loop with S = 0: on-policy like sync, generation on the same 2 workers as the S-arms, so
    # against it the S-arms show what overlapping generation with learning buys, apart from the workers
    "async S=0": ("async_S0", "uniform", ["--set", "mode=async", "--set", "workers=2", "--set", "max_staleness=0"], 1),
    "async S=1": ("async_S1", "uniform", ["--set", "mode=async", "--set", "workers=2", "--set", "max_staleness=1"], 1),
    "async S=2": ("async_S2", "uniform", ["--set", "mode=async", "--set", "workers=2", "--set", "max_staleness=2"], 1),
    "partial (APRIL 1.5x)": ("april", "uniform+april", ["--set", "planner_options.april.overprovision=1.5"], None),
}


def bench(name: str, args) -> Path:
    """Run (or reuse: the bench reuses a finished run whose settings are equal) one arm's bench."""
    slug, planner, extra, jobs = ARMS[name]
    out = args.out / slug
    cmd = [sys.executable, "-m", "rollwise.cli", "bench", "--task", args.task, "--planners", planner,
           "--seeds", str(args.seeds), "--jobs", str(jobs or args.jobs), "--out", str(out), *extra]
    for flag, value in (("--budget", args.budget), ("--eval-size", args.eval_size)):
        if value:
            cmd += [flag, str(value)]
    print("async_bench:", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)
    return out / "runs" / "default" / planner.replace("+", "_plus_")


def rows_of(d: Path) -> list[dict]:
    return metrics_rows(d)


def on_wall_axis(rows: list[dict]) -> list[dict]:
    """The run's evaluations placed at training wall seconds instead of tokens (step 0 at 0 s)."""
    return [{"step": r["step"], "tokens": 0.0 if r["step"] == 0 else r["wall_s"], "eval_acc": r["eval_acc"]}
            for r in rows if "eval_acc" in r]


def per_run(rows: list[dict], budget: float) -> dict:
    last = rows[-1]
    stale: dict[int, int] = {}
    for r in rows[1:]:
        k = int(r.get("staleness_max", 0))
        stale[k] = stale.get(k, 0) + 1
    fates: dict[str, int] = {}
    for k, v in last.items():
        if k.startswith("tok/") and k != "tok/verified" and k.split("/")[1] not in ("eval", "oracle"):
            fates[k.split("/")[2]] = fates.get(k.split("/")[2], 0) + v
    return {"auc": auc(rows, budget), "acc_at_budget": float(acc_at(rows, budget)), "steps": last["step"],
            "tokens": last["tokens"], "wall_s": float(last["wall_s"]), "gen_s": float(last.get("gen_s", 0.0)),
            "tokens_by_fate": fates, "staleness_hist": stale, "worker_restarts": last.get("worker_restarts", 0)}


def step_speedup(base_s: list[float], arm_s: list[float], rng) -> dict:
    """Seconds per training step, base / arm, paired by seed: the mean ratio with a 95% bootstrap interval."""
    r = np.asarray(base_s) / np.asarray(arm_s)
    means = r[rng.integers(0, len(r), size=(2000, len(r)))].mean(axis=1)
    return {"ratio": float(r.mean()), "lo": float(np.percentile(means, 2.5)), "hi": float(np.percentile(means, 97.5))}


def summarize(runs: dict[str, list[list[dict]]], budget: float, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    base = runs["sync"]
    wall_budget = max(r[-1]["wall_s"] for arm in runs.values() for r in arm)
    out = {}
    for name, arm in runs.items():
        n = min(len(base), len(arm))
        figs = [per_run(r, budget) for r in arm[:n]]
        hist: dict[int, int] = {}
        fates: dict[str, int] = {}
        for f in figs:
            for k, v in f["staleness_hist"].items():
                hist[k] = hist.get(k, 0) + v
            for k, v in f["tokens_by_fate"].items():
                fates[k] = fates.get(k, 0) + v
        s = {"seeds": n, "per_seed": figs, "staleness_hist": dict(sorted(hist.items())),
             "tokens_by_fate_mean": {k: v / n for k, v in fates.items()},
             "steps_mean": float(np.mean([f["steps"] for f in figs])),
             "s_per_step": float(np.mean([f["wall_s"] / f["steps"] for f in figs])),
             "auc_mean": float(np.mean([f["auc"] for f in figs])),
             "acc_at_budget_mean": float(np.mean([f["acc_at_budget"] for f in figs]))}
        if name != "sync":
            b = [per_run(r, budget) for r in base[:n]]
            for key in ("auc", "acc_at_budget"):
                d = paired_difference([x[key] for x in b], [x[key] for x in figs], rng)
                s[f"{key}_diff"] = {**d, "verdict": verdict(d["lo"], d["hi"], n)}
            s["step_speedup"] = step_speedup([x["wall_s"] / x["steps"] for x in b],
                                             [f["wall_s"] / f["steps"] for f in figs], rng)
            if name not in ("async S=0", "partial (APRIL 1.5x)") and "async S=0" in runs:  # overlap alone
                s0 = [per_run(r, budget) for r in runs["async S=0"][:n]]
                s["step_speedup_vs_S0"] = step_speedup([x["wall_s"] / x["steps"] for x in s0],
                                                       [f["wall_s"] / f["steps"] for f in figs], rng)
            s["tokens_to_target"] = tokens_to_target_ratio(base[:n], arm[:n], budget, rng)
            s["wall_to_target"] = tokens_to_target_ratio([on_wall_axis(r) for r in base[:n]],
                                                         [on_wall_axis(r) for r in arm[:n]], wall_budget, rng)
        out[name] = s
    return out


def ratio_text(r: dict) -> str:
    if r["ratio"] == 0:
        return f"not reached [{r['lo']:.2f}, {r['hi']:.2f}]"
    return f"{r['ratio']:.2f}× [{r['lo']:.2f}, {r['hi']:.2f}]"


def report(result: dict) -> str:
    arms = result["arms"]
    lines = [f"# sync vs async vs partial rollouts on `{result['task']}` ({result['budget']:,} tokens, "
             f"{result['seeds']} seeds)", "", f"Command: `{result['command']}`", "",
             "Each arm against the synchronous loop, paired by seed; 95% bootstrap intervals over seeds.", "",
             "| arm | mean acc over budget | Δ vs sync | verdict | acc at budget Δ | tokens-to-target | "
             "wall-to-target | s / step | step speed-up vs sync | vs async S=0 | steps | staleness (steps by lag, "
             "all seeds) | tokens by fate (mean per run) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in arms.items():
        fate = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(s["tokens_by_fate_mean"].items()))
        hist = ", ".join(f"{k}: {v}" for k, v in s["staleness_hist"].items())
        if name == "sync":
            cells = ["baseline", "", "", "1.00×", "1.00×", f"{s['s_per_step']:.1f}", "1.00×", ""]
        else:
            a, z = s["auc_diff"], s["acc_at_budget_diff"]
            cells = [f"{a['diff']:+.3f} [{a['lo']:+.3f}, {a['hi']:+.3f}]", a["verdict"],
                     f"{z['diff']:+.3f} [{z['lo']:+.3f}, {z['hi']:+.3f}]", ratio_text(s["tokens_to_target"]),
                     ratio_text(s["wall_to_target"]), f"{s['s_per_step']:.1f}", ratio_text(s["step_speedup"]),
                     ratio_text(s["step_speedup_vs_S0"]) if "step_speedup_vs_S0" in s else ""]
        lines.append(f"| {name} | {s['auc_mean']:.4f} | " + " | ".join(cells) +
                     f" | {s['steps_mean']:.1f} | {hist} | {fate} |")
    lines += ["", "Step speed-up: seconds per training step, the other arm's / this arm's, paired by seed.", "",
              "Wall time is training only (evaluations and checkpoints excluded, in both loops). "
              "A synchronous run used one core, two runs at once; an async run had both cores for its learner "
              "and 2 Ray workers, one run at a time.", "",
              f"Load average when this report was written: {result['load_avg_start'][0]:.1f} at its start, {result['load_avg_end'][0]:.1f} at its end (the runs are reused when finished)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="chain")
    ap.add_argument("--budget", type=int, help="generated tokens per run (default: the task's bench default)")
    ap.add_argument("--eval-size", type=int, help="held-out prompts (default: the task's bench default)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2, help="runs at once for the one-thread arms (sync, APRIL)")
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of: " + ", ".join(ARMS))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    names = [a.strip() for a in args.arms.split(",")]
    unknown = [a for a in names if a not in ARMS]
    if unknown or "sync" not in names:
        sys.exit(f"async_bench: unknown arm(s) {unknown} or no sync arm; known: {list(ARMS)}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    dirs = {name: bench(name, args) for name in names}
    runs = {name: [rows_of(d / f"seed{s}") for s in range(args.seeds)] for name, d in dirs.items()}
    budget = json.loads((dirs["sync"] / "seed0" / "config.json").read_text())["budget_tokens"]
    result = {"command": "python " + " ".join(sys.argv), "task": args.task, "budget": budget, "seeds": args.seeds,
              "load_avg_start": load_start, "arms": summarize(runs, budget)}
    result["load_avg_end"] = os.getloadavg()
    (args.out / "summary.json").write_text(json.dumps(result, indent=2))
    (args.out / "report.md").write_text(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
