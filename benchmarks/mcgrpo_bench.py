"""MC-GRPO (median-centred advantage, G+1 samples) against GRPO at G = 2 and G = 8 on the embedded
default, at equal generated-token budgets, over several seeds.

The MC-GRPO paper reports that its G = 2 result comes within 1% of G = 8; this script records what
rollwise measures, whichever way it goes. Each arm is a `rollwise bench` run of the uniform planner
with a different group size / advantage, so every arm shares the base checkpoint, task and budget.

    python benchmarks/mcgrpo_bench.py [--seeds 3] [--budget 40000] [--out bench-mcgrpo]

Writes benchmarks/results/mcgrpo.json and .md.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from rollwise.run.records import rows as metrics_rows

import numpy as np

ARMS = {  # name -> (group size n, advantage); MC-GRPO draws G + 1 samples, the +1 being the pivot
    "grpo_G2": (2, "grpo"), "mcgrpo_G2": (3, "mc-grpo"),
    "grpo_G8": (8, "grpo"), "mcgrpo_G8": (9, "mc-grpo"),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=40_000)
    ap.add_argument("--eval-size", type=int, default=1000)
    ap.add_argument("--out", default="bench-mcgrpo")
    args = ap.parse_args()
    results = {}
    for arm, (n, adv) in ARMS.items():
        out = Path(args.out) / arm
        cmd = [sys.executable, "-m", "rollwise.cli", "bench", "--planners", "uniform", "--seeds", str(args.seeds),
               "--budget", str(args.budget), "--eval-size", str(args.eval_size), "--out", str(out),
               "--set", f"n={n}", "--set", f"learner.advantage={adv}",
               # keep prompts x samples per step comparable: 256 rollouts per step for every arm
               "--set", f"batch_size={max(1, 256 // n)}"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        summary = json.loads((out / "summary.json").read_text())
        runs = []
        for s in range(args.seeds):
            rows = metrics_rows(out / "runs" / "default" / "uniform" / f"seed{s}")
            evals = [r for r in rows if "eval_acc" in r]
            runs.append({"final_acc": evals[-1]["eval_acc"], "base_acc": evals[0]["eval_acc"], "tokens": rows[-1]["tokens"]})
        finals = np.array([r["final_acc"] for r in runs])
        results[arm] = {"n": n, "advantage": adv, "final_acc_mean": float(finals.mean()),
                        "final_acc_sd": float(finals.std(ddof=1)) if len(finals) > 1 else 0.0, "runs": runs,
                        "mean_abs_adv": summary["mixes"]["default"]["planners"]["uniform"]["mean_abs_adv"]}
        print(arm, json.dumps(results[arm]))
    gap = {g: results[f"mcgrpo_G{g}"]["final_acc_mean"] - results[f"grpo_G{g}"]["final_acc_mean"] for g in (2, 8)}
    record = {"command": "python benchmarks/mcgrpo_bench.py " + " ".join(sys.argv[1:]), "budget_tokens": args.budget,
              "seeds": args.seeds, "arms": results, "mcgrpo_minus_grpo": gap,
              "g2_vs_g8": {adv: results[f"{a}_G2"]["final_acc_mean"] - results[f"{a}_G8"]["final_acc_mean"]
                           for a, adv in (("grpo", "grpo"), ("mcgrpo", "mc-grpo"))}}
    res_dir = Path(__file__).parent / "results"
    (res_dir / "mcgrpo.json").write_text(json.dumps(record, indent=2))
    lines = [f"# MC-GRPO vs GRPO at G = 2 and G = 8\n", f"`{record['command']}` — budget {args.budget} tokens, "
             f"{args.seeds} seeds, held-out {args.eval_size} prompts.\n",
             "| arm | samples/prompt | final held-out acc (mean ± sd) |", "|---|---|---|"]
    for arm, r in results.items():
        lines.append(f"| {arm} | {r['n']} | {r['final_acc_mean']:.3f} ± {r['final_acc_sd']:.3f} |")
    lines.append(f"\nG=2 minus G=8: GRPO {record['g2_vs_g8']['grpo']:+.3f}, MC-GRPO {record['g2_vs_g8']['mc-grpo']:+.3f}.")
    (res_dir / "mcgrpo.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
