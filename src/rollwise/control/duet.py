"""DUET: DUal-controlled tokEn allocaTion (arXiv 2605.08441; abstract only, no code found).

DUET controls the token budget on two axes: how many rollouts each prompt gets (count
allocation, before rollout) and how long each rollout may run (a marker-gated abort, during
generation). This component implements the **count allocation only**. The abort half
(stop shortly after an answer marker such as \\boxed{}; past H_abort + grace tokens with no marker,
abort with probability 1 - q, else continue with importance weight 1/q) is in-flight control of the
Generate stage: it needs an engine hook that watches each sequence as it grows, which a planner
component cannot reach. It is out of scope here.

Count allocation ([ABS] mechanism; [INF] formula, the paper's surrogate was not retrieved)::

    p_bar(x) = (c_last * w + a0) / (n_last * w + a0 + b0),  w = decay ** age   (Beta-shrunk last
               pass rate, its evidence faded by the age of the visit; unseen -> prior mean)
    u(x) = p_bar (1 - p_bar)                              (pre-rollout informativeness)
    n_x = clip(round(N_budget * u / sum u), n_min, n_max) over prompts with u >= u_zero; else 0
    N_budget = the incoming budget, sum of ns (n * |batch| unless another allocator ran first)

Prompts given 0 rollouts are skipped this step (the planner drops zero-size requests; there is no
refill), so the freed budget goes to the informative prompts of the batch.

Defaults [INF, embedded n = 8]: a0 = b0 = 1, decay = 0.99 per step (a 60-step-old visit, about
one epoch of a 2000-prompt pool at B = 32, keeps ~55% of its weight), u_zero = 0.1 (skips a prompt
whose last visit, under ~15 steps ago, was 8/8 or 0/8; older ones get a reduced share instead),
n_min = 2, n_max = 2n. Reads only PromptHistory rows of the batch: O(batch).
"""
from __future__ import annotations

import numpy as np

from ..core.registry import register
from ..core.types import Prompt
from .base import Component, StepContext


def informativeness(last_n, last_correct, age, a0: float, b0: float, decay: float) -> np.ndarray:
    """u = p_bar (1 - p_bar) with p_bar the decayed, Beta-shrunk last pass rate (age < 0: unseen)."""
    last_n = np.asarray(last_n, np.float64)
    age = np.asarray(age, np.float64)
    w = np.where(age >= 0, decay ** np.maximum(age, 0), 0.0)
    p = (np.asarray(last_correct, np.float64) * w + a0) / (last_n * w + a0 + b0)
    return p * (1 - p)


def allocate_counts(u: np.ndarray, budget: int, n_min: int, n_max: int, u_zero: float) -> np.ndarray:
    u = np.asarray(u, np.float64)
    active = u >= u_zero
    out = np.zeros(len(u), dtype=np.int64)
    if active.any() and budget > 0:
        raw = budget * u[active] / u[active].sum()
        out[active] = np.clip(np.round(raw), n_min, n_max).astype(np.int64)
    return out


@register("planner", "duet", provenance="ABS+INF",
          summary="DUET (count half): rollouts per prompt by a pre-rollout informativeness score")
class DUET(Component):
    def __init__(self, n_min: int = 2, n_max: int | None = None, a0: float = 1.0, b0: float = 1.0,
                 decay: float = 0.99, u_zero: float = 0.1):
        if n_min < 0 or (n_max is not None and n_max < max(n_min, 1)):
            raise ValueError("duet: need 0 <= n_min <= n_max")
        if a0 <= 0 or b0 <= 0 or not 0 < decay <= 1:
            raise ValueError("duet: need a0, b0 > 0 and 0 < decay <= 1")
        self.n_min, self.n_max = int(n_min), n_max
        self.a0, self.b0, self.decay, self.u_zero = float(a0), float(b0), float(decay), float(u_zero)

    def scores(self, ids, ctx: StepContext) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        h = ctx.history
        last = h.last_step[ids]
        age = np.where(last >= 0, ctx.step - last, -1)
        return informativeness(h.last_n[ids], h.last_correct[ids], age, self.a0, self.b0, self.decay)

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        if not prompts:
            return ns
        u = self.scores([p.id for p in prompts], ctx)
        n_max = self.n_max or 2 * ctx.n
        out = allocate_counts(u, int(sum(ns)), self.n_min, n_max, self.u_zero)
        ctx.metrics["duet/skipped"] = float((out == 0).sum())
        ctx.metrics["duet/mean_u"] = float(u.mean())
        return [int(k) for k in out]
