"""VIP: Variance-Informed Predictive allocation ("Adaptive Rollout Allocation for Online Reinforcement
Learning with Verifiable Rewards", Nguyen, Nguyen, Ma, Zhao, She, Nguyen; CUHK / Huawei; arXiv 2602.01601,
ICLR 2026). Read from the abstract [ABS] and a secondary summary [SEC: papernotes.org, "the gradient
variance of Dr.GRPO and RLOO is proportional to p(1-p)"]. The official repository (github.com/HieuNT91/VIP)
holds a README only ("code will be available after cleanup"), so nothing here is [CODE].

A uniform n spends as much on a prompt the policy always solves (or never does) as on one it solves half
the time, though only the latter's gradient carries signal. VIP predicts each prompt's success
probability before sampling and moves rollouts to where they reduce the update's variance most.

Rule::

    p_i: a Gaussian-process prediction of prompt i's success probability     [ABS: "a lightweight Gaussian
        at this step from its visits in the last `window` steps (the           process model to predict
        PromptHistory log: step t_j, pass rate r_j of n_j rollouts)            per-prompt success
                                                                               probabilities based on recent
                                                                               rollouts"]
        GP over steps: prior mean m = the pass rate of every rollout of the   [INF: the inputs, kernel,
        last step logged (0.5 before any), kernel s2 exp(-(t-t')^2 / 2 l^2),   prior and noise are
        noise of a visit (q (1-q) + 1e-3) / n_j with q = (c_j + 1)/(n_j + 2)    rollwise's; the summary
        (the binomial variance of its pass rate); posterior mean at the       read does not give them]
        current step, clipped to [0, 1]; a prompt never visited gets m
    variance of prompt i's contribution with n_i rollouts: p_i (1-p_i) / n_i   [SEC: proportional to
                                                                               p(1-p); the 1/n_i INF]
    n = argmin sum_i p_i (1 - p_i) / n_i  s.t.  sum_i n_i = budget,            [ABS: "a convex optimization
        n_min <= n_i <= n_max (continuous relaxation, scipy's SLSQP), then    problem ... under a hard
        rounded keeping the sum: floors, then +1 to the largest remainders     compute budget constraint";
        within the bounds                                                      the rounding INF]
    budget = the rollouts the prompts came with (B x n for a plain planner)   [INF, as knapsack's]

Without bounds the optimum is Neyman's allocation, n_i proportional to sqrt(p_i (1 - p_i)): a prompt at
p = 0 or 1 gets n_min, one at 1/2 the most. Defaults [INF, scaled to the embedded n = 8]: window = 8
steps, length_scale = 4 steps, s2 = 0.05, n_min = 2, n_max = 4n. Metrics: `vip/max_n`, `vip/min_n`,
`vip/p_mean` (mean prediction of the step's prompts).

Composes with selectors before it (greso+vip), filters and in-flight control after it (vip+duet-abort,
vip+dapo), PODS (vip+pods), DAS (vip+das), arrol after it (vip+arrol) and components that hold prompts
back with n = 0 (replay, depo, dots: a prompt that comes with n = 0 keeps it and the budget is the rest's).
Another allocator (ar3po's, knapsack's, speed-rl's) would overwrite its n or be overwritten, and a staged
sampler would spend beyond its budget: `compose` refuses them by name.
"""
from __future__ import annotations

import numpy as np

from ..core.registry import register
from ..core.types import Prompt
from .base import Component, StepContext, refuse_allocators
from .capabilities import SetsN


def gp_success(steps: np.ndarray, correct: np.ndarray, n: np.ndarray, at: float, prior: float, s2: float,
               length_scale: float) -> float:
    """Posterior mean at step `at` of a GP over steps (prior mean `prior`, RBF kernel s2, length_scale)
    observed at `steps` with pass rates correct / n and binomial noise; clipped to [0, 1]."""
    from scipy.linalg import cho_factor, cho_solve

    if len(steps) == 0:
        return float(prior)
    t = np.asarray(steps, np.float64)
    r = np.asarray(correct, np.float64) / np.asarray(n, np.float64)
    q = (np.asarray(correct, np.float64) + 1.0) / (np.asarray(n, np.float64) + 2.0)
    noise = (q * (1.0 - q) + 1e-3) / np.asarray(n, np.float64)
    K = s2 * np.exp(-((t[:, None] - t[None, :]) ** 2) / (2.0 * length_scale ** 2)) + np.diag(noise)
    k_star = s2 * np.exp(-((t - at) ** 2) / (2.0 * length_scale ** 2))
    mean = prior + k_star @ cho_solve(cho_factor(K), r - prior)
    return float(np.clip(mean, 0.0, 1.0))


def round_keeping_sum(x: np.ndarray, total: int, lo: int, hi: int) -> np.ndarray:
    """Integers near x within [lo, hi] summing to `total`: floors, then +1 to the largest remainders."""
    out = np.clip(np.floor(x + 1e-9), lo, hi).astype(np.int64)
    for i in np.argsort(-(x - out), kind="stable"):
        if out.sum() >= total:
            break
        if out[i] < hi:
            out[i] += 1
    return out


def allocate_variance(p: np.ndarray, budget: int, n_min: int, n_max: int) -> np.ndarray:
    """n minimising sum_i p_i (1 - p_i) / n_i under sum n_i = budget, n_min <= n_i <= n_max (SLSQP on the
    continuous relaxation, then rounded keeping the sum). A budget outside [K n_min, K n_max] is clipped."""
    from scipy.optimize import minimize

    K = len(p)
    budget = int(min(max(budget, K * n_min), K * n_max))
    v = np.maximum(p * (1.0 - p), 1e-9)  # a floor keeps the objective strictly convex at p = 0 or 1
    x0 = np.full(K, budget / K)
    res = minimize(lambda x: float(np.sum(v / x)), x0, jac=lambda x: -v / x ** 2, method="SLSQP",
                   bounds=[(n_min, n_max)] * K,
                   constraints=[{"type": "eq", "fun": lambda x: x.sum() - budget, "jac": lambda x: np.ones(K)}],
                   options={"ftol": 1e-12, "maxiter": 500})
    if not res.success:
        raise RuntimeError(f"vip: the allocation did not solve ({res.message})")
    return round_keeping_sum(res.x, budget, n_min, n_max)


@register("planner", "vip", provenance="ABS+SEC+INF",
          summary="VIP: GP-predicted success per prompt, rollouts allocated to minimise gradient variance under the budget")
class VIP(Component):
    declares = (SetsN(),)

    def __init__(self, n_min: int = 2, n_max: int | None = None, window: int = 8, length_scale: float = 4.0,
                 s2: float = 0.05):
        if n_min < 1 or (n_max is not None and n_max < n_min):
            raise ValueError(f"vip: need 1 <= n_min <= n_max, not n_min={n_min}, n_max={n_max}")
        if window < 1 or not length_scale > 0 or not s2 > 0:
            raise ValueError(f"vip: need window >= 1, length_scale > 0 and s2 > 0, not {window}, {length_scale}, {s2}")
        import importlib.util

        if importlib.util.find_spec("scipy") is None:
            raise ValueError("vip needs scipy (its convex program and Gaussian-process solve): "
                             "pip install 'rollwise[vip]'")
        self.n_min, self.n_max, self.window = int(n_min), n_max, int(window)
        self.length_scale, self.s2 = float(length_scale), float(s2)

    def compose(self, before: list, after: list) -> None:
        """Another component that sets each prompt's n (knapsack, ar3po, cures, speed-rl, ...) is refused by
        name, as is arrol before it (control/base.py, refuse_allocators)."""
        refuse_allocators(self, before, after)

    def predict(self, ids: list[int], ctx: StepContext) -> np.ndarray:
        """Each prompt's GP prediction of its success probability at this step (see the module)."""
        log = ctx.history.log()
        recent = log["step"] >= ctx.step - self.window
        steps, prompt, n, correct = (log[k][recent] for k in ("step", "prompt", "n", "correct"))
        prior = 0.5
        if len(steps):
            last = steps == steps.max()
            prior = float(correct[last].sum() / max(n[last].sum(), 1))
        out = np.empty(len(ids))
        for i, pid in enumerate(ids):
            mine = (prompt == pid) & (n > 0)
            out[i] = gp_success(steps[mine], correct[mine], n[mine], ctx.step, prior, self.s2, self.length_scale)
        return out

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        if not prompts:
            return ns
        if ctx.history is None:
            raise ValueError("vip needs the prompt history (each prompt's recent pass rates); this host has none")
        live = [i for i, k in enumerate(ns) if k > 0]  # n = 0: held back by another component (replay, depo)
        if not live:
            return ns
        p = self.predict([prompts[i].id for i in live], ctx)
        n_max = self.n_max if self.n_max is not None else 4 * ctx.n
        out = allocate_variance(p, int(sum(ns)), self.n_min, max(n_max, self.n_min))
        ctx.metrics.update({"vip/max_n": float(out.max()), "vip/min_n": float(out.min()), "vip/p_mean": float(p.mean())})
        res = [0] * len(ns)
        for i, k in zip(live, out):
            res[i] = int(k)
        return res
