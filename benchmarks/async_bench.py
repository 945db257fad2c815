"""Synchronous vs asynchronous (Ray workers, staleness bound S) vs partial rollouts (APRIL), side by side.

Every arm trains the same base on the same task with the same seed and token budget, through the CLI a
user runs (`rollwise train`), one arm after another on this machine. Per arm it records: accuracy at the
budget and the area under the accuracy-vs-tokens curve (bench/stats.py, the bench's figures), wall time
(training only, eval excluded), tokens by purpose and fate (aborted, carried), and the staleness
histogram (learner version minus the oldest version among a step's tokens).

    OMP_NUM_THREADS=1 python benchmarks/async_bench.py --task arithmetic --budget 40000 --seeds 0 \
        --out benchmarks/results/async_bench_arithmetic

What it can and cannot show on 2 cores: the async arms run the learner and K generation workers on the
same two cores, so their wall time measures contention, not the overlap a cluster gets (the simulator's
timing model, benchmarks/sim_async.py, gives that). What it does show: whether stale rollouts (S = 1, 2)
learn as well per token as fresh ones, and what partial rollouts charge as aborted and carried.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from rollwise.bench.stats import acc_at, auc

ARMS = {  # name -> extra `rollwise train` arguments
    "sync": [],
    "async S=1": ["--mode", "async", "--workers", "2", "--max-staleness", "1"],
    "async S=2": ["--mode", "async", "--workers", "2", "--max-staleness", "2"],
    "partial (APRIL 1.5x)": ["--planner", "uniform+april", "--set", "planner_options.april.overprovision=1.5"],
}


def run_arm(name: str, extra: list[str], args, seed: int, out: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "rollwise.cli", "train", "--task", args.task, "--seed", str(seed), "--out", str(out),
           "--steps", "100000", "--set", f"budget_tokens={args.budget}", "--set", f"eval_size={args.eval_size}",
           "--set", f"eval_every_tokens={args.budget // 10}", "--set", "eval_every=0", *extra]
    if not (out / "done.json").exists():
        t0 = time.time()
        with open(out.parent / f"{out.name}.log", "w") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
        (out / "done.json").write_text(json.dumps({"seconds": time.time() - t0, "cmd": cmd}))
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def summarize(rows: list[dict], budget: int) -> dict:
    last = rows[-1]
    stale: dict[int, int] = {}
    for r in rows[1:]:
        k = int(r.get("staleness_max", 0))
        stale[k] = stale.get(k, 0) + 1
    fates = {k.split("/")[2]: 0 for k in last if k.startswith("tok/")}
    for k, v in last.items():
        if k.startswith("tok/") and not k.startswith(("tok/eval/", "tok/oracle/")):
            fates[k.split("/")[2]] += v
    return {"acc_at_budget": float(acc_at(rows, budget)), "auc": auc(rows, budget), "steps": last["step"],
            "tokens": last["tokens"], "wall_s": round(last.get("wall_s", float("nan")), 1),
            "tokens_by_fate": {k: v for k, v in fates.items() if v}, "staleness_hist": dict(sorted(stale.items())),
            "worker_restarts": last.get("worker_restarts", 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="arithmetic")
    ap.add_argument("--budget", type=int, default=40000)
    ap.add_argument("--eval-size", type=int, default=500)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--arms", default=",".join(ARMS), help="comma-separated subset of: " + ", ".join(ARMS))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    arms = [a.strip() for a in args.arms.split(",")]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        sys.exit(f"async_bench: unknown arm(s) {unknown}; known: {list(ARMS)}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"command": " ".join(sys.argv), "task": args.task, "budget": args.budget, "seeds": args.seeds,
              "load_avg_start": os.getloadavg(), "arms": {}}
    for name in arms:
        per_seed = []
        for seed in args.seeds:
            slug = name.replace(" ", "_").replace("=", "").replace("(", "").replace(")", "").replace(".", "")
            out = args.out / "runs" / f"{slug}_seed{seed}"
            out.parent.mkdir(parents=True, exist_ok=True)
            per_seed.append(summarize(run_arm(name, ARMS[name], args, seed, out), args.budget))
            print(f"async_bench: {name} seed {seed}: {per_seed[-1]}", flush=True)
        result["arms"][name] = {"args": ARMS[name], "seeds": per_seed,
                                "acc_at_budget_mean": float(np.mean([s["acc_at_budget"] for s in per_seed])),
                                "auc_mean": float(np.mean([s["auc"] for s in per_seed]))}
    result["load_avg_end"] = os.getloadavg()
    (args.out / "summary.json").write_text(json.dumps(result, indent=2))
    lines = [f"# sync vs async vs partial rollouts on `{args.task}` ({args.budget:,} tokens, seeds {args.seeds})", "",
             f"Command: `{result['command']}`", "",
             "| arm | acc at budget | mean acc over budget | steps | wall s (train) | tokens by fate | staleness histogram |",
             "|---|---|---|---|---|---|---|"]
    for name, r in result["arms"].items():
        s = r["seeds"][0] if len(r["seeds"]) == 1 else None
        fate = ", ".join(f"{k} {v:,}" for k, v in (s or r["seeds"][0])["tokens_by_fate"].items())
        hist = ", ".join(f"{k}: {v}" for k, v in (s or r["seeds"][0])["staleness_hist"].items())
        lines.append(f"| {name} | {r['acc_at_budget_mean']:.3f} | {r['auc_mean']:.4f} | "
                     f"{np.mean([x['steps'] for x in r['seeds']]):.0f} | "
                     f"{np.mean([x['wall_s'] for x in r['seeds']]):.0f} | {fate} | {hist} |")
    lines += ["", f"Accuracy columns and steps: mean over seeds {args.seeds}; tokens by fate and the staleness "
              f"histogram (steps by their largest lag): seed {args.seeds[0]}. Wall time: training only.",
              "", f"Load average at start {result['load_avg_start'][0]:.1f}, at end {result['load_avg_end'][0]:.1f} "
              "(wall times are only comparable within one quiet run)."]
    (args.out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
