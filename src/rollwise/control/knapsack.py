"""Knapsack-RL: "Knapsack RL: Unlocking Exploration of LLMs via Optimizing Budget Allocation" (Li, Chen,
Yang, Ding, Sun, Zhang, Huang, Luo; ByteDance Seed / CUHK-SZ; arXiv 2509.25849). Read from the
abstract [ABS], a secondary summary of the method [SEC: sciencestack.ai TL;DR: "Task Value = probability
of a non-zero gradient x InfoGain, InfoGain(p) ~ p(1-p)^2, solved by dynamic programming"] and the
released allocation module [CODE: `sampling_budget_by_knapsack`, `solve_by_dp`, `dp_core_numba`].

A uniform n wastes rollouts: a saturated prompt (pass rate 1) and a hopeless one (pass rate 0) both
give GRPO a zero gradient. Each prompt is a knapsack item whose value depends on how many rollouts
it gets; a solve under the step's rollout budget moves rollouts from saturated to hard prompts.

Rule::

    p_i = the prompt's pass rate at its last visit (PromptHistory)          [CODE: reward_states
          never visited -> it keeps the n it came with                        (validity, success_rate)]
    Value(n, p) = (1 - p^n - (1-p)^n) * p (1-p)^2                             [SEC + CODE]
          P(non-zero gradient with n rollouts) x InfoGain(p) ~ p (1-p)^2
    cost = 1 per rollout; budget = the sum of the n_i the prompts came with    [ABS: budgets in rollouts;
          (batch_size x n for a plain planner)                                 CODE: total_budget = B n]
    every visited prompt gets n_min first (p = 0 and p = 1 included)           [CODE: negative_n =
                                                                                positive_n = min_n]
    fallback: the rollouts 0 < p < 1 prompts need to show a non-zero gradient  [CODE: allow_fallback,
          with probability alpha, c_i = log(1-alpha) / log(max(p, 1-p));        cost_estimation=
          if sum_i min(n_max, c_i) - n_min leaves budget over, the surplus       "probability"]
          goes in equal shares to the p = 0 prompts (else to the p = 1 ones):
          this is how a hard prompt gets many rollouts
    knapsack: max sum_i Value(n_min + k_i, p_i) over 0 <= k_i <= n_max - n_min,  [CODE: solve_by_dp]
          sum k_i <= the rest, for 0 < p < 1, by dynamic programming; a rest
          the solve cannot place (every item at n_max) goes to the fallback prompts

Deviations [INF]:
  * The code's DP scores an item that gets no extra rollout as 0 instead of Value(n_min, p), which
    pushes at least one extra rollout onto every item; rollwise maximises the paper's objective,
    sum_i Value(n_i, p_i), counting the n_min each item already has.
  * The code compares sum_i min(n_max, c_i) (totals) with the budget left *after* n_min; rollwise
    subtracts the n_min each item already has, so the surplus is what those items do not need.
  * Cost is rollouts, as in the abstract and the code; a token-weighted cost (a prompt's mean length) would make the
    budget the step's tokens, not implemented.
  * A budget smaller than n_min per visited prompt is exceeded (n_min is a floor), not an error.

Composes with selectors before it (greso+knapsack), filters and in-flight control after it (knapsack+dapo,
knapsack+duet-abort, knapsack+arrol), PODS without its own n (knapsack+pods) and components that hold
prompts back with n = 0 (replay, depo, dots: such a prompt keeps 0, the budget is the rest's).
`compose` refuses by name another component that sets each prompt's n (vip, cures, e3, speed-rl, ...),
a staged sampler (ar3po, aero, dars: their stages spend beyond the budget) and arrol before it.

Defaults [INF, scaled to the embedded n = 8; the paper's range was not read]: n_min = 2 (the code's
default), n_max = 4n, alpha = 0.9 (the code's default), fallback on.
Cost: O(K (n_max - n_min) budget) per step for K prompts (numpy over the budget axis).
"""
from __future__ import annotations

import math

import numpy as np

from ..core.registry import register
from ..core.types import Prompt
from .base import Component, StepContext, refuse_allocators
from .capabilities import SetsN


def value(n, p):
    """Value(n, p) = (1 - p^n - (1-p)^n) p (1-p)^2: the chance that n rollouts give a non-zero GRPO
    gradient times the paper's InfoGain(p) ~ p (1-p)^2."""
    n, p = np.asarray(n, np.float64), np.asarray(p, np.float64)
    return (1.0 - p ** n - (1.0 - p) ** n) * p * (1.0 - p) ** 2


def needed(p: float, alpha: float) -> float:
    """Rollouts for a non-zero gradient with probability alpha: log(1 - alpha) / log(max(p, 1 - p))."""
    return math.log(1.0 - alpha) / math.log(max(p, 1.0 - p))


def solve(p: np.ndarray, n_min: int, n_max: int, budget: int) -> np.ndarray:
    """Extra rollouts k_i in [0, n_max - n_min] with sum k_i <= budget, maximising
    sum_i Value(n_min + k_i, p_i): a multiple-choice knapsack by dynamic programming over the budget."""
    K, kmax = len(p), n_max - n_min
    budget = max(0, min(int(budget), K * kmax))
    if K == 0 or budget == 0:
        return np.zeros(K, np.int64)
    gain_K_k = value(n_min + np.arange(kmax + 1)[None, :], p[:, None])  # Value at each extra count
    best_W = np.full(budget + 1, -np.inf)
    best_W[0] = 0.0
    pick_KW = np.zeros((K, budget + 1), np.int64)
    for i in range(K):
        new_W = np.full(budget + 1, -np.inf)
        for k in range(min(kmax, budget) + 1):  # item i takes k: best_W[w - k] + gain
            cand = best_W[: budget + 1 - k] + gain_K_k[i, k]
            better = cand > new_W[k:]  # strict: the smallest k wins a tie
            new_W[k:] = np.where(better, cand, new_W[k:])
            pick_KW[i, k:] = np.where(better, k, pick_KW[i, k:])
        best_W = new_W
    w = int(np.flatnonzero(best_W == best_W.max()).max())  # the largest spend among the optima
    out = np.zeros(K, np.int64)
    for i in range(K - 1, -1, -1):
        out[i] = pick_KW[i, w]
        w -= out[i]
    return out


def share(total: int, k: int) -> np.ndarray:
    """`total` split into k near-equal integer shares, the larger ones first."""
    out = np.full(k, total // k, np.int64)
    out[: total % k] += 1
    return out


def allocate_knapsack(p: np.ndarray, ns: np.ndarray, n_min: int, n_max: int, alpha: float,
                      fallback: bool) -> np.ndarray:
    """n_i for pass rates p (NaN: never visited, keeps ns_i) under the budget sum(ns); see the module."""
    budget = int(ns.sum())
    seen = ~np.isnan(p)
    out = np.where(seen, n_min, ns).astype(np.int64)
    rest = budget - int(out.sum())
    if rest <= 0:
        return out
    eff = seen & (p > 0) & (p < 1)
    spare_to = np.flatnonzero(seen & (p == 0)) if (seen & (p == 0)).any() else np.flatnonzero(seen & (p == 1))
    if fallback and len(spare_to):
        want = sum(max(0, int(min(n_max, needed(float(q), alpha))) - n_min) for q in p[eff])
        if want < rest:  # the effective prompts need less than the budget: the surplus goes to the hard ones
            out[spare_to] += share(rest - want, len(spare_to))
            rest = want
    extra = solve(p[eff], n_min, n_max, rest)
    out[np.flatnonzero(eff)] += extra
    left = rest - int(extra.sum())
    if left > 0:  # more than every effective prompt can take: to the fallback prompts, else all of them
        to = spare_to if len(spare_to) else (np.flatnonzero(eff) if eff.any() else np.arange(len(p)))
        out[to] += share(left, len(to))
    return out


@register("planner", "knapsack", provenance="CODE+SEC+INF",
          summary="Knapsack-RL: rollouts per prompt by a knapsack on Value(n,p) under the step's rollout budget")
class KnapsackRL(Component):
    declares = (SetsN(),)

    def __init__(self, n_min: int = 2, n_max: int | None = None, alpha: float = 0.9, fallback: bool = True):
        if n_min < 1 or (n_max is not None and n_max < n_min):
            raise ValueError("knapsack: need 1 <= n_min <= n_max")
        if not 0 < alpha < 1:
            raise ValueError(f"knapsack: alpha must lie in (0, 1), not {alpha}")
        self.n_min, self.n_max, self.alpha, self.fallback = int(n_min), n_max, float(alpha), bool(fallback)

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        if not prompts:
            return ns
        if ctx.history is None:
            raise ValueError("knapsack needs the prompt history (each prompt's last pass rate); this host has none")
        ns_K = np.asarray(ns, np.int64)
        live = np.flatnonzero(ns_K > 0)  # n = 0: held back by another component (replay, depo); keeps 0
        if len(live) == 0:
            return ns
        p = ctx.history.last_pass_rate(np.array([prompts[i].id for i in live], dtype=np.int64))
        n_max = self.n_max if self.n_max is not None else 4 * ctx.n
        out = allocate_knapsack(p, ns_K[live], self.n_min, n_max, self.alpha, self.fallback)
        ctx.metrics["knapsack/max_n"] = float(out.max())
        ctx.metrics["knapsack/min_n"] = float(out.min())
        ns_K[live] = out
        return [int(k) for k in ns_K]

    def compose(self, before: list, after: list) -> None:
        """Another component that sets each prompt's n (vip, cures, speed-rl, pods with its n, ...) and a staged
        sampler (ar3po, aero, dars: stages beyond the budget) are refused by name, as is arrol before it."""
        refuse_allocators(self, before, after)
