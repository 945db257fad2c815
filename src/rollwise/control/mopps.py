"""MoPPS: Model Predictive Prompt Selection (Qu, Wang, Mao, Hu, Ommer, Ji, "Can Prompt Difficulty be Online
Predicted for Accelerating RL Finetuning of Reasoning Models?", arXiv 2507.04632; code thu-rllab/MoPPS).

Each prompt's success rate is a Beta posterior, updated from the rewards of its own train rollouts; each
step a Thompson sample of every candidate's rate picks the B candidates whose sampled rate is closest to a
target. It needs no extra rollouts: the posterior is fed by the rollouts that train anyway.

Rule [CODE: recipe/ours/mopps.py `PosteriorSampler.sample_batch` / `train`; recipe/ours/our_ray_trainer.py]::

    candidates: oversample x B prompts from the epoch's pass (the data loader's batch is ts_ratio x B)
    prior:      alpha_0 = beta_0 = 1 for a prompt never seen
    draw:       r_x ~ Beta(alpha_x, beta_x) per candidate (one Thompson sample per step)
    topk:       keep the B candidates with the smallest (r_x - target)^2
    threshold:  keep B of the candidates with lower <= r_x <= upper, at random; when fewer than B are in
                range, the B with the smallest distance to the range (in-range ones first)
    update, after the step, for each trained prompt only (s correct of n rollouts):
                alpha_x <- d alpha_x + (1 - d) alpha_0 + s
                beta_x  <- d beta_x  + (1 - d) beta_0  + (n - s)
                (d = bandit_decay_ratio: forgetting toward the prior, so the posterior tracks a moving policy)

"Correct" is the rollout's `correct` flag; the code's `acc` metric is binary accuracy (acc >= 1), the same
thing on rollwise's verified rewards [CODE, normalised]. The code's update reads the selected batch's mean
accuracy times rollout.n, i.e. the count of correct rollouts; here the group's own counts are used, which is
the same for a fixed n and stays right when another component changes a group's size [INF].
The candidates not selected are used up from the epoch's pass as the code's data loader uses them up
(its epoch count is multiplied by ts_ratio to keep the number of steps).

How it differs from `frontier` (control/frontier.py): frontier reads PromptHistory's running totals (no
forgetting), scores s(1 - s) and draws B candidates *at random* with probability proportional to s(1 - s) +
eps, then gives the frontier prompts more rollouts. MoPPS keeps its own posterior with exponential
forgetting toward the prior, ranks *deterministically* by the sampled rate's distance to a target (any
target, not only 0.5; all randomness is in the Thompson draw) and never changes n.

Defaults [CODE: recipe/ours/config/our_trainer.yaml and scripts/*/*_topk_noinit.sh]: target 0.5, strategy
topk, Beta(1, 1) prior, decay 0.5 (the "priordecay" runs), oversample 8 (ts_ratio of the countdown and
geo3k scripts; the math scripts use 16), lower/upper 0.3/0.7. Not reproduced: the code's option to start
the posterior from an offline pass (`bandit_init`, off in the published scripts).
Cost: O(candidates) per step; two float arrays over the pool.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from ..core import schema
from ..core.registry import register
from ..core.schema import Float, Int, Rule, at_least, checked, finite, one_of
from ..core.types import Batch, Group, Prompt
from .base import Component, StepContext

UNIT = Rule(lambda v: 0.0 <= v <= 1.0, "in [0, 1]")


@checked
@dataclass(frozen=True)
class MoPPSOptions:
    """`planner_options.mopps`, checked by core/schema.py."""

    target: Annotated[Float, UNIT] = 0.5
    oversample: Annotated[Int, at_least(1, "candidates per selected prompt")] = 8
    decay: Annotated[Float, UNIT] = 0.5
    prior_alpha: Annotated[Float, finite(0.0, strict=True)] = 1.0
    prior_beta: Annotated[Float, finite(0.0, strict=True)] = 1.0
    strategy: Annotated[str, one_of("topk", "threshold")] = "topk"
    lower: Annotated[Float, UNIT] = 0.3
    upper: Annotated[Float, UNIT] = 0.7


def beta_update(alpha, beta, correct, n, decay: float, alpha0: float, beta0: float):
    """One step of the forgetting posterior: (d alpha + (1 - d) alpha0 + s, d beta + (1 - d) beta0 + n - s)."""
    correct = np.asarray(correct, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    return (decay * np.asarray(alpha) + (1.0 - decay) * alpha0 + correct,
            decay * np.asarray(beta) + (1.0 - decay) * beta0 + (n - correct))


def nearest(sampled: np.ndarray, need: int, target: float) -> np.ndarray:
    """Indices of the `need` sampled rates closest to `target` (squared distance; ties in candidate order)."""
    return np.argsort((sampled - target) ** 2, kind="stable")[: max(need, 0)]


def in_band(sampled: np.ndarray, need: int, lower: float, upper: float, rng: np.random.Generator) -> np.ndarray:
    """The code's threshold strategy: `need` in-range candidates at random; when too few are in range, the
    `need` closest to it (in-range ones have distance 0, so they come first)."""
    inside = np.flatnonzero((sampled >= lower) & (sampled <= upper))
    if len(inside) >= need:
        return rng.permutation(inside)[: max(need, 0)]
    dist = np.maximum(lower - sampled, 0.0) + np.maximum(sampled - upper, 0.0)
    return np.argsort(dist, kind="stable")[: max(need, 0)]


@register("planner", "mopps", provenance="CODE",
          summary="MoPPS: Thompson-sample each candidate's Beta posterior pass rate, keep the B nearest a target")
class MoPPS(Component):
    def __init__(self, target: float = 0.5, oversample: int = 8, decay: float = 0.5, prior_alpha: float = 1.0,
                 prior_beta: float = 1.0, strategy: str = "topk", lower: float = 0.3, upper: float = 0.7):
        o = schema.build(MoPPSOptions, {k: v for k, v in locals().items() if k != "self"},
                         "planner_options.mopps", prefix=True)
        if o.lower > o.upper:
            raise ValueError(f"planner_options.mopps: lower ({o.lower}) must be <= upper ({o.upper})")
        self.options = o
        self.oversample = o.oversample  # the Planner draws oversample x need candidates for select
        self.alpha = np.zeros(0)
        self.beta = np.zeros(0)

    def bind(self, pool_size: int) -> None:
        o = self.options
        self.alpha = np.full(pool_size, o.prior_alpha, dtype=np.float64)
        self.beta = np.full(pool_size, o.prior_beta, dtype=np.float64)

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        if not candidates or need <= 0:
            return []
        o = self.options
        ids = np.fromiter((p.id for p in candidates), dtype=np.int64, count=len(candidates))
        sampled = ctx.rng.beta(self.alpha[ids], self.beta[ids])  # one Thompson draw per candidate
        if o.strategy == "topk":
            chosen = nearest(sampled, need, o.target)
        else:
            chosen = in_band(sampled, need, o.lower, o.upper, ctx.rng)
        if len(chosen):
            ctx.metrics["mopps/sampled_rate"] = float(sampled[chosen].mean())
        return [candidates[i] for i in chosen]

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        o = self.options
        groups = [g for g in groups if g.n > 0]
        if not groups:
            return
        ids = np.array([g.prompt.id for g in groups], dtype=np.int64)
        correct = np.array([g.num_correct for g in groups], dtype=np.float64)
        n = np.array([g.n for g in groups], dtype=np.float64)
        self.alpha[ids], self.beta[ids] = beta_update(self.alpha[ids], self.beta[ids], correct, n, o.decay,
                                                      o.prior_alpha, o.prior_beta)
        mean = self.alpha[ids] / (self.alpha[ids] + self.beta[ids])
        ctx.metrics["mopps/predicted_rate"] = float(mean.mean())

    def state_dict(self) -> dict:
        return {"alpha": self.alpha.copy(), "beta": self.beta.copy()}

    def load_state_dict(self, state: dict) -> None:
        self.alpha = np.asarray(state["alpha"], dtype=np.float64).copy()
        self.beta = np.asarray(state["beta"], dtype=np.float64).copy()
