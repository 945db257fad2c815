"""DARS: Difficulty Adaptive Rollout Sampling ("Depth-Breadth Synergy in RLVR: Unlocking LLM
Reasoning Gains with Adaptive Exploration", arXiv 2508.13755; code yangzhch6/DARS).

GRPO's cumulative advantage peaks at 50% accuracy and under-weights hard prompts. DARS gives
low-accuracy prompts a second round of rollouts sized to rebalance them.

Rule [CODE: verl/verl/trainer/ppo/ray_dars_trainer.py L182-230 (schedule_ET / schedule_HW) and
L955-1120 (the two-stage step)]::

    stage 1: N responses per prompt; accuracy a
    a == 0 -> a = 0.5 / N;  a >= 0.5 -> dN = 0
    without std normalisation: S(a) = 2a(1-a), A_peak = N/2   (with: S = 2 sqrt(a(1-a)), A_peak = N)
    ET (equal treatment):     dN = ceil((A_peak - N S(a)) / S(a))              = N(1-2a)^2 / (4a(1-a))
    HW (hardness weighted):   dN = ceil((2(1-a) A_peak - N S(a)) / S(a))       = N(1-2a) / (2a)
    dN = min(dN, N_max - N); stage 2: dN more responses, merged into the same group
    train only groups with 0 < combined accuracy < upper (1.0); no refill

`dars` is ET, `dars-hw` is HW. The advantage DARS trains with is GRPO *without* std normalisation
(grpo_use_std=False): that is a learner setting (advantage "grpo", scale_std=False), not the
planner's; keep use_std here equal to it. The code's zero-score padding to a multiple of the world
size has no counterpart here (no data-parallel split).

Defaults [CODE experiments/*.sh]: N = 8 (the embedded n is also 8), N_max = 32 (ET) or 64 (HW),
upper_threshold 1.0. With another stage-1 size N, N_max scales as 4N (ET) / 8N (HW) [INF].
"""
from __future__ import annotations

import math

from ..core.registry import register
from ..core.types import Group, Prompt, Request
from .base import Component, StepContext
from .capabilities import SetsN, Staged


def _s_and_peak(acc: float, N: int, std: bool) -> tuple[float, float]:
    if std:
        return 2 * math.sqrt(acc * (1 - acc)), float(N)
    return 2 * acc * (1 - acc), 0.5 * N


def schedule_et(acc: float, N: int, N_max: int, std: bool = False) -> int:
    """Extra rollouts, equal treatment (ported from schedule_ET)."""
    if acc <= 1e-6:
        acc = 0.5 / N
    if acc >= 0.5:
        return 0
    S, peak = _s_and_peak(acc, N, std)
    return max(0, min(math.ceil((peak - N * S) / S), N_max - N))


def schedule_hw(acc: float, N: int, N_max: int, std: bool = False) -> int:
    """Extra rollouts, hardness weighted (ported from schedule_HW)."""
    if acc <= 1e-6:
        acc = 0.5 / N
    if acc >= 0.5:
        return 0
    S, peak = _s_and_peak(acc, N, std)
    return max(0, min(math.ceil((2 * (1 - acc) * peak - N * S) / S), N_max - N))


@register("planner", "dars", provenance="CODE",
          summary="DARS-ET: second-stage rollouts for low-accuracy prompts (equal treatment)")
class DARS(Component):
    needs_sampling = True  # a second stage of samples after seeing the first
    declares = (SetsN(), Staged())  # the `more` hook: stages
    mode = "et"

    def __init__(self, n_max: int | None = None, use_std: bool = False, upper: float = 1.0,
                 mode: str | None = None):
        mode = mode or self.mode
        if mode not in ("et", "hw"):
            raise ValueError(f"dars: mode must be 'et' or 'hw', not {mode!r}")
        if n_max is not None and n_max < 1:
            raise ValueError("dars: n_max must be >= 1")
        self.mode, self.n_max, self.use_std, self.upper = mode, n_max, bool(use_std), float(upper)
        self._stage: dict[int, int] = {}  # this step: prompt id -> stage reached

    def extra(self, acc: float, N: int) -> int:
        n_max = self.n_max if self.n_max is not None else (4 if self.mode == "et" else 8) * N
        fn = schedule_et if self.mode == "et" else schedule_hw
        return fn(acc, N, n_max, self.use_std)

    def begin_step(self, ctx: StepContext) -> None:
        self._stage = {}

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        for p in prompts:
            self._stage[p.id] = 1
        return ns

    def more(self, groups: list[Group], ctx: StepContext) -> list[Request]:
        out = []
        for g in groups:
            if self._stage.get(g.prompt.id, 1) != 1 or g.n == 0:
                continue
            self._stage[g.prompt.id] = 2
            dn = self.extra(g.pass_rate, g.n)
            if dn > 0:
                out.append(Request(g.prompt, dn))
        ctx.metrics["dars/2nd_rollout"] = ctx.metrics.get("dars/2nd_rollout", 0.0) + sum(r.n for r in out)
        return out

    def accept(self, group: Group, ctx: StepContext) -> bool:
        a = group.pass_rate
        return 0.0 < a < self.upper

    def state_dict(self) -> dict:
        return {"stage": dict(self._stage)}

    def load_state_dict(self, s: dict) -> None:
        self._stage = {int(k): int(v) for k, v in s["stage"].items()}


@register("planner", "dars-hw", provenance="CODE",
          summary="DARS-HW: second-stage rollouts for low-accuracy prompts (hardness weighted)")
class DARSHW(DARS):
    mode = "hw"
