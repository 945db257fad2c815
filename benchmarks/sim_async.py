"""What asynchronous and partial rollouts do to wall time at scale, by the simulator's timing model.

    python benchmarks/sim_async.py   -> benchmarks/results/sim_async.json and .md

Rows are drawn from the simulator's `default` population (a reasoning model: lognormal lengths of a
few hundred tokens, wrong answers longer, a cap at max_len) and the timing model's 7B-class costs
(sim/timing.py; not calibrated to any cluster). For each scale (devices) and batch, a synchronous
step (one generation round then training, colocated) is compared with APRIL (over-provisioned rounds
that stop at the batch and carry unfinished rows) and AReaL-style asynchronous training (generation and
training on disjoint devices, no batch barrier). Reported as speedups of step time at equal trained
tokens; the published figures (AReaL: up to 2.57x, 2.77x in later versions; APRIL: +22.5% rollout
throughput on average, +44% at most) are put beside them. A model of wall time only: it cannot say
whether the stale or carried tokens learn as well (the measured runs on the tiny model speak to that).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from rollwise.sim.population import Population, PopulationConfig
from rollwise.sim.timing import TimingConfig, april_steady_state, async_step_seconds, sync_step_seconds

HERE = Path(__file__).resolve().parent
PUBLISHED = {"AReaL": "up to 2.57x training speedup (2.77x in later versions) over synchronous systems",
             "APRIL": "+22.5% rollout throughput on average, +44% at most (GRPO/DAPO/GSPO, slime)"}


def lengths_drawer(pop: Population, n: int, rng: np.random.Generator):
    def draw(k: int) -> np.ndarray:
        if k <= 0:
            return np.zeros((0, n))
        ids = rng.integers(0, pop.num_prompts, size=k)
        gidx, _, length, _, _, _ = pop.draw(ids, np.full(k, n), 0, rng)
        out = np.zeros((k, n))
        for g in range(k):
            out[g] = length[gidx == g]
        return out
    return draw


def main() -> int:
    pop = Population(100_000, PopulationConfig(max_len=8192), seed=0)
    rows, n = [], 16
    for engines, batch in ((8, 64), (64, 512), (1000, 8192)):
        cfg = replace(TimingConfig(), engines=engines)
        rng = np.random.default_rng(0)
        draw = lengths_drawer(pop, n, rng)
        sync = [sync_step_seconds(draw(batch), cfg) for _ in range(20)]
        sync_s = float(np.mean(sync))
        tokens = float(np.mean([draw(batch).sum() for _ in range(20)]))
        april = {o: april_steady_state(draw, batch, o, cfg, steps=30) for o in (0.25, 0.5, 1.0)}
        asyn = async_step_seconds(tokens, batch * n, cfg)
        row = {"engines": engines, "batch": batch, "n": n, "sync_step_s": round(sync_s, 2),
               "async_speedup": round(sync_s / asyn, 2),
               **{f"april_{o}_speedup": round(float(sync_s / (a["step_s"] * tokens / a["tokens_per_step"])), 2)
                  for o, a in april.items()}}
        rows.append(row)
        print(row, flush=True)
    out = {"command": "python benchmarks/sim_async.py", "population": "default (max_len 8192)", "rows": rows,
           "published": PUBLISHED}
    (HERE / "results" / "sim_async.json").write_text(json.dumps(out, indent=2) + "\n")
    md = ["| devices | batch x n | sync step (s) | async (AReaL-style) | APRIL 25% | APRIL 50% | APRIL 100% |",
          "|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['engines']} | {r['batch']} x {r['n']} | {r['sync_step_s']} | {r['async_speedup']}x | "
                  f"{r['april_0.25_speedup']}x | {r['april_0.5_speedup']}x | {r['april_1.0_speedup']}x |")
    md.append("\nSpeedups of step time at equal trained tokens over the synchronous step. Published: "
              + "; ".join(f"{k}: {v}" for k, v in PUBLISHED.items()) + ".")
    (HERE / "results" / "sim_async.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
