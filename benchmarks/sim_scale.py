"""Scale benchmark of the population simulator: 10^6 prompts x 1000 steps x (512 prompts x 16 samples)
with real rollwise planners (greso, uniform). Each planner runs in its own process (peak memory is
per run) through the public CLI; the figures go to benchmarks/results/sim_scale.json.

    OMP_NUM_THREADS=1 python benchmarks/sim_scale.py [--prompts 1000000] [--steps 1000] [--planners greso uniform]

`elapsed_s` is the simulator's own loop (set-up excluded); `process_s` is the whole command
(interpreter start, imports, allocating the population and the history included).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run_one(planner: str, prompts: int, steps: int, batch: int, n: int, seed: int) -> dict:
    cmd = [sys.executable, "-m", "rollwise.cli", "sim", "--prompts", str(prompts), "--steps", str(steps),
           "--batch", str(batch), "--n", str(n), "--planner", planner, "--seed", str(seed)]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = round(wall, 2)
    out["command"] = "OMP_NUM_THREADS=1 rollwise " + " ".join(cmd[3:])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--planners", nargs="+", default=["greso", "uniform"])
    ap.add_argument("--out", default=str(HERE / "results" / "sim_scale.json"))
    args = ap.parse_args(argv)
    import numpy

    runs = []
    for planner in args.planners:
        r = run_one(planner, args.prompts, args.steps, args.batch, args.n, args.seed)
        print(f"{planner}: {r['elapsed_s']:.1f} s loop, {r['process_s']:.1f} s process, "
              f"peak {r['peak_mem_mb']:.0f} MB, final_acc {r['final_acc']:.4f}, tokens {r['tokens']:.3g}",
              file=sys.stderr, flush=True)
        runs.append(r)
    result = {
        "benchmark": "sim_scale",
        "goal": ">= 1,000,000 prompts x 1,000 steps (batch 512 x n 16) in <= 60 s on 2 cores",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "numpy": numpy.__version__,
                    "platform": platform.platform(), "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "1")},
        "config": {"prompts": args.prompts, "steps": args.steps, "batch": args.batch, "n": args.n, "seed": args.seed},
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
