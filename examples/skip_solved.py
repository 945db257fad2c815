"""A planner component of your own, in 30 lines: skip prompts the policy solved on their last visit.

Run it by import path (from the repository root, so that `examples` is importable):

    PYTHONPATH=. rollwise train --planner examples.skip_solved:SkipSolved --steps 20 --out runs/skip
    PYTHONPATH=. rollwise train --planner examples.skip_solved:SkipSolved+dapo \
        --set 'planner_options={"examples.skip_solved:SkipSolved": {"keep_prob": 0.2}}' --steps 20 --out runs/skip2

It only overrides `select`: the Planner draws candidates from the epoch-shuffled pool, every component's
`select` filters them in turn, and the Planner refills from the pool until the batch is full. Options
are the constructor's parameters: rollwise checks a config's options against them before anything runs.
"""
from __future__ import annotations

from rollwise.control.base import Component, StepContext
from rollwise.core.types import Prompt


class SkipSolved(Component):
    """Drop a candidate whose last group was all correct, except with probability `keep_prob` (so that a
    solved prompt is still looked at now and then, in case the policy forgets it)."""

    def __init__(self, keep_prob: float = 0.1):
        if not 0.0 <= keep_prob <= 1.0:
            raise ValueError(f"SkipSolved: keep_prob must be in [0, 1], got {keep_prob}")
        self.keep_prob = float(keep_prob)
        self.skipped = 0  # a running count, reported in metrics.jsonl

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        rate_C = ctx.history.last_pass_rate([p.id for p in candidates])  # NaN: never visited
        keep = [p for p, r in zip(candidates, rate_C) if not r >= 1.0 or ctx.rng.random() < self.keep_prob]
        self.skipped += len(candidates) - len(keep)
        ctx.metrics["skip_solved/skipped"] = self.skipped
        return keep

    def state_dict(self) -> dict:  # what a checkpoint must hold to resume exactly
        return {"skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.skipped = state["skipped"]
