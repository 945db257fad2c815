"""Frontier Sampling (from ScaleCUA): send rollouts to tasks at the current capability frontier.

Paper: ScaleCUA, "...scales online RL for CUAs via verifiable task synthesis and efficient
training" (code pointer THUDM/SCALE-CUA, no snapshot available; NOT OpenGVLab/ScaleCUA, a different
paper); the spec gives no arXiv id. Spec: shared/methods/selection-allocation.md §15, a placeholder.
Known [ABS]: Frontier Sampling "tracks per-task capability and allocates rollouts to the current
learning frontier". (The 2.83x speedup in the abstract belongs to Visual Context Segmentation, not
to Frontier Sampling.)

Rule [INF, the spec's proposal]:
  * per task, success s ~ Beta(correct + 1, wrong + 1) from PromptHistory's running totals (a
    Thompson draw with `ctx.rng`, so unseen tasks get explored), frontier(x) = s (1 - s);
  * from `oversample x need` random candidates, draw `need` without replacement with probability
    proportional to frontier + eps (Efraimidis-Spirakis keys u^(1/w));
  * `allocate`: give more rollouts to the top-frontier tasks: n_x proportional to the frontier
    score, clipped to [n_min, n_max], the step's total sum(n) kept equal to len(prompts) x n.
Defaults [INF]: oversample = 4, eps = 0.01, allocation on with n_min = n/2, n_max = 2n
(4..16 for the embedded n = 8); `prior` "total" uses all visits (cumulative), "last" uses only the
last visit (tracks a moving policy better, noisier).
Cost: O(candidates) per step, nothing is O(pool).
"""
from __future__ import annotations

import numpy as np

from ..core.registry import register
from ..core.types import Prompt
from .base import Component, StepContext
from .capabilities import SetsN


@register("planner", "frontier", provenance="ABS+INF",
          summary="Frontier Sampling: draw prompts prop. to s(1-s)+eps, s ~ Beta posterior; more rollouts to the frontier")
class Frontier(Component):
    declares = (SetsN(),)

    def __init__(self, oversample: int = 4, eps: float = 0.01, reallocate: bool = True,
                 n_min: int | None = None, n_max: int | None = None, prior: str = "total"):
        if oversample < 1 or eps < 0 or prior not in ("total", "last"):
            raise ValueError("frontier: need oversample >= 1, eps >= 0, prior in {'total', 'last'}")
        self.oversample, self.eps, self.reallocate = int(oversample), float(eps), bool(reallocate)
        self.n_min, self.n_max, self.prior = n_min, n_max, prior
        self._score: dict[int, float] = {}  # this step's frontier draws, for allocate

    def frontier(self, ids: np.ndarray, ctx: StepContext) -> np.ndarray:
        h = ctx.history
        if self.prior == "total":
            c, n = h.total_correct[ids].astype(np.float64), h.total_n[ids].astype(np.float64)
        else:
            c, n = h.last_correct[ids].astype(np.float64), h.last_n[ids].astype(np.float64)
        s = ctx.rng.beta(c + 1.0, n - c + 1.0)
        return s * (1.0 - s)

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        if not candidates:
            return candidates
        ids = np.fromiter((p.id for p in candidates), dtype=np.int64, count=len(candidates))
        f = self.frontier(ids, ctx)
        w = f + self.eps
        u = ctx.rng.random(len(ids))
        with np.errstate(divide="ignore"):
            keys = np.where(w > 0, np.log(np.maximum(u, 1e-300)) / np.maximum(w, 1e-300), -np.inf)
        order = np.argsort(-keys, kind="stable")[: max(need, 0)]
        for i in order:
            self._score[int(ids[i])] = float(f[i])
        return [candidates[i] for i in order]

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        if not self.reallocate or not prompts:
            self._score = {}
            return ns
        n = ctx.n
        lo = self.n_min if self.n_min is not None else max(2, n // 2)
        hi = self.n_max if self.n_max is not None else 2 * n
        f = np.array([self._score.get(p.id, 0.0) for p in prompts]) + self.eps
        total = int(sum(ns))
        out = allocate_proportional(f, total, lo, hi)
        self._score = {}
        return [int(x) for x in out]

    def state_dict(self) -> dict:
        return {"score": {int(k): float(v) for k, v in self._score.items()}}

    def load_state_dict(self, state: dict) -> None:
        self._score = {int(k): float(v) for k, v in state["score"].items()}


def allocate_proportional(weights: np.ndarray, total: int, lo: int, hi: int) -> np.ndarray:
    """Integers n_i in [lo, hi], roughly proportional to weights, summing to `total` when feasible
    (clipped to [k lo, k hi] otherwise). Largest remainders get the leftover units."""
    k = len(weights)
    total = int(min(max(total, k * lo), k * hi))
    w = np.maximum(np.asarray(weights, dtype=np.float64), 1e-12)
    # water-filling: scale so that the clipped allocation sums to total
    a, b = 0.0, total / w.min() + 1.0
    for _ in range(100):
        mid = (a + b) / 2
        if np.clip(mid * w, lo, hi).sum() < total:
            a = mid
        else:
            b = mid
    x = np.clip(b * w, lo, hi)
    out = np.clip(np.floor(x).astype(np.int64), lo, hi)
    left = total - int(out.sum())
    order = np.argsort(-(x - np.floor(x)), kind="stable")
    i = 0
    while left > 0 and i < 4 * k:
        j = order[i % k]
        if out[j] < hi:
            out[j] += 1
            left -= 1
        i += 1
    while left < 0:  # floor cannot overshoot, but stay safe
        j = int(np.argmax(out))
        out[j] -= 1
        left += 1
    return out
