"""Control overhead per step at a pool of 1,000,000 prompts, against a real embedded training step.

Control = the planner's step coroutine (`Planner.plan`: selection, allocation, stages, finish, accept;
the engine runs outside it, in the driver, so it is not counted) and `Planner.observe`, plus the
PromptHistory update. They run here on the simulator's 1M-prompt pool with the embedded step's shape
(32 prompts x 8 samples), so only Control is timed; the real step is one `Trainer.train_step` of the
embedded default, measured in the same process. Goal (issue 3): overhead <= 1% of the real step.

    OMP_NUM_THREADS=1 python benchmarks/control_overhead.py   -> benchmarks/results/control_overhead.json
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from rollwise.run.config import load_config
from rollwise.run.loop import Trainer
from rollwise.sim.runner import SimConfig, Simulator, unsupported_reason

POOL, STEPS, WARM = 1_000_000, 30, 5
PLANNERS = ["uniform", "dapo", "greso", "prompt-replay", "cdas", "frontier", "depo", "pilot-commit", "ar3po",
            "aero", "dars", "dars-hw", "duet", "cures", "e3", "greso+ar3po", "prompt-replay+dapo", "cdas+dars"]


def timed(fn, bucket):
    """fn, with its wall time added to bucket[0]."""
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            bucket[0] += time.perf_counter() - t0
    return wrapper


class TimedPlan:
    """The planner's step coroutine with the time spent inside it (not in the engine) added to bucket."""

    def __init__(self, gen, bucket):
        self._next, self.send = timed(gen.__next__, bucket), timed(gen.send, bucket)

    def __next__(self):
        return self._next()


def control_ms_per_step(planner: str) -> float:
    sim = Simulator(SimConfig(prompts=POOL, steps=STEPS, batch=32, n=8, planner=planner, keep_rows=False))
    bucket = [0.0]
    plan = sim.planner.plan
    sim.planner.plan = lambda ctx: TimedPlan(plan(ctx), bucket)
    sim.planner.observe = timed(sim.planner.observe, bucket)
    sim.history.record = timed(sim.history.record, bucket)
    per_step = []
    for i in range(STEPS):
        bucket[0] = 0.0
        sim.train_step()
        if i >= WARM:
            per_step.append(bucket[0])
    return 1000 * statistics.median(per_step)


def real_step_ms() -> float:
    torch.set_num_threads(1)
    tr = Trainer(load_config(None, {"out": "/tmp/rollwise-overhead-run", "eval_every": 0}))
    times = []
    for _ in range(6):
        t0 = time.perf_counter()
        tr.train_step()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times[1:])


def main():
    real = real_step_ms()
    rows = {}
    for p in PLANNERS:
        ms = control_ms_per_step(p)
        rows[p] = {"control_ms_per_step": round(ms, 3), "fraction_of_real_step": round(ms / real, 5)}
        print(f"{p:<22} {ms:8.2f} ms/step  {100 * ms / real:6.2f}% of a real step", flush=True)
    out = {"command": "OMP_NUM_THREADS=1 python benchmarks/control_overhead.py", "pool": POOL,
           "step_shape": "32 prompts x 8 samples", "real_embedded_step_ms": round(real, 1),
           "not_run": {p: unsupported_reason(p) for p in ("hive", "dots")}, "planners": rows,
           "torch": torch.__version__, "python": sys.version.split()[0]}
    path = Path(__file__).parent / "results" / "control_overhead.json"
    path.write_text(json.dumps(out, indent=2))
    print(f"real embedded step: {real:.0f} ms; written {path}")


if __name__ == "__main__":
    main()
