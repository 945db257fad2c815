"""DAS's decode-equivalents per step at unchanged samples (exploratory; not a Bench 3.0 measurement).

Runs `uniform` and `das` for the same steps on the shipped arithmetic base with a small train pool (so
each prompt comes back every other step: the repetitive case DAS is for) and prints, per step, the
rollouts, the tokens generated and the decode-equivalents the ledger charges (decoded tokens +
draft_cost x draft tokens scored), and two ratios:

    own     DAS's decode-equivalents / the tokens it generated (plain decoding charges 1 per token,
            so this is DAS against plain decoding of the very same rollouts)
    paired  DAS's decode-equivalents / uniform's, step by step (same rollouts per step; the runs
            diverge after the first update, so lengths differ a little)

    OMP_NUM_THREADS=1 python benchmarks/das_decode_ratio.py [--steps 8] [--pool 32] [--min-prob 0.5]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from rollwise.run.config import load_config  # noqa: E402
from rollwise.run.loop import Trainer  # noqa: E402


def run(planner: str, args, out: str, options: dict) -> list[dict]:
    cfg = load_config(None, {"planner": planner, "steps": args.steps, "eval_every": 0, "checkpoint_every": 1000,
                             "batch_size": args.batch, "n": args.n, "out": out, "seed": args.seed,
                             "task_options": {"pool_size": args.pool}, "planner_options": options})
    rows, before = [], {}
    for r in [r for r in Trainer(cfg).run() if r["step"] >= 1]:  # running totals per step: "tokens" is the ledger's budget_tokens()
        now = {"equiv": r["tokens"], "tokens": r["tokens_train"] + r.get("tokens_discarded", 0),
               "rollouts": r["rollouts"], "verified": r.get("tok/verified", 0)}
        rows.append({"step": r["step"], **{k: v - before.get(k, 0) for k, v in now.items()}})
        before = now
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--pool", type=int, default=32)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-prob", type=float, default=0.5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = run("uniform", args, f"{tmp}/uniform", {})
        das = run("das", args, f"{tmp}/das", {"das": {"min_prob": args.min_prob}})
    print("step rollouts(uniform,das) tokens(das) verified(das) equiv(uniform) equiv(das) own paired")
    for u, d in zip(plain, das):
        print(f"{d['step']:4d} {u['rollouts']:5d} {d['rollouts']:5d} {d['tokens']:6d} {d['verified']:6d} "
              f"{u['equiv']:7d} {d['equiv']:7d} {d['equiv'] / d['tokens']:.3f} {d['equiv'] / u['equiv']:.3f}")
    later = [(u, d) for u, d in zip(plain, das) if d["step"] > 2]  # from the first revisit of a prompt on
    if later:
        own = sum(d["equiv"] for _, d in later) / sum(d["tokens"] for _, d in later)
        paired = sum(d["equiv"] for _, d in later) / sum(u["equiv"] for u, _ in later)
        print(f"steps 3-{args.steps}: own ratio {own:.3f}, paired ratio {paired:.3f} (exploratory, seed {args.seed})")


if __name__ == "__main__":
    main()
