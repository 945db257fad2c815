"""The most that dropping zero-variance groups for free could save tuned GRPO, from the ledger's own counts.

    python benchmarks/zero_var_ceiling.py bench3_confirm3_task1 bench3_confirm_remainder [--arm grpo]

Rows whose group has equal rewards have zero advantage and are already left out of the learner's
passes (`drop_zero_adv`), so what dropping such a group saves is only its generation: its decode and its
prompt's prefill. Per step, from the baseline arm's `metrics.jsonl` (cumulative counts differenced):

    saved_t = zero_var_frac_gen_t x (decode x step tokens_t + prefill x step prompt tokens_t)
    ceiling = sum_t compute_t / (sum_t compute_t - sum_t saved_t)

under the plan's cost profile, assuming zero-variance groups are as long as the step's average group
(short all-correct answers make this an upper bound on task 1's saving). Issue 47's audit found ~1.16x
(task 1) and ~1.33x (testbed); 1 / (1 - zero-variance share), which the README first gave, counts the
learner's share too, which those rows never cost.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from archive import RESULTS
from arm_profile import arm_of, metrics_files

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from rollwise.bench import costs  # noqa: E402
from rollwise.bench.plan import recorded_plan  # noqa: E402


def run_ceiling(rows: list[dict], ratios: dict) -> tuple[float, float]:
    """(compute, zero-variance generation compute) summed over a run's steps."""
    total = saved = 0.0
    prev = {"compute": 0.0, "tokens": 0.0, "prompt_tokens": 0.0}
    for r in rows:
        if "compute" not in r or "zero_var_frac_gen" not in r:
            continue
        d = {k: r.get(k, 0.0) - prev[k] for k in prev}
        prev = {k: r.get(k, prev[k]) for k in prev}
        total += d["compute"]
        saved += r["zero_var_frac_gen"] * (ratios["decode"] * d["tokens"] + ratios["prefill"] * d["prompt_tokens"])
    return total, saved


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("benches", nargs="+", help="record folders under benchmarks/results")
    ap.add_argument("--arm", default=None, help="the arm to read (default: the plan's baseline)")
    args = ap.parse_args(argv)
    print("| record | arm | runs | zero-variance share of groups | share of compute in their generation | ceiling |")
    print("|---|---|---|---|---|---|")
    for name in args.benches:
        bench = RESULTS / name
        plan = recorded_plan(bench)
        arm = args.arm or plan.baseline
        ratios = costs.load_profile(plan.profile).ratios
        per_run, shares = [], []
        for inner, data in metrics_files(bench).items():
            if arm_of(inner) != arm:
                continue
            rows = [json.loads(x) for x in data.decode().splitlines() if x.strip()]
            per_run.append(run_ceiling(rows, ratios))
            shares += [r["zero_var_frac_gen"] for r in rows if "zero_var_frac_gen" in r]
        total, saved = sum(t for t, _ in per_run), sum(s for _, s in per_run)
        print(f"| {name} | {arm} | {len(per_run)} | {statistics.fmean(shares):.3f} | {saved / total:.3f} | "
              f"{total / (total - saved):.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
