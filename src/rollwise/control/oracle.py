"""Oracle selection: the limit a pre-rollout selector can approach (rollwise's own; no paper).

Rule: for every candidate, measure its pass rate under the *current* policy with `m` extra samples
(`ctx.sample([Request(prompt, m, purpose="oracle")])`). Those samples are charged to the ledger under
purpose "oracle", which the budget excludes by design (`Ledger.OFF_BUDGET`): the oracle's knowledge
is free, its training rollouts are not. Only prompts whose measured pass rate is strictly between 0
and 1 (a group of them can have non-zero reward variance) are rolled out for training; the others
are skipped. Order is the sampler's (random), or highest p(1 - p) first with `rank="variance"`.
The measurement is redone every step because the policy moves; nothing is cached.

Defaults [INF]: m = 16 oracle samples per candidate (a prompt with true pass rate p is misread as
0 or 1 with probability (1-p)^16 + p^16, e.g. 0.19 at p = 0.1; m = 32 halves the miss rate at twice
the wall time), oversample = 2 candidates per needed prompt (the Planner draws more when too few
survive), at most `max_measured` = 8 x B candidates measured per step: past that the step trains on
fewer prompts rather than measuring the whole pool (the Planner would otherwise keep drawing until a
full pass, e.g. with a policy that solves nothing). Cost: O(oversample x B x m) off-budget rollouts
per step, at most 8 x B x m; nothing is O(pool).
"""
from __future__ import annotations

import numpy as np

from ..core.registry import register
from ..core.types import Prompt, Request
from .base import Component, StepContext


@register("planner", "oracle", provenance="INF",
          summary="oracle: measure each candidate's true pass rate off-budget, roll out only 0 < p < 1")
class Oracle(Component):
    name = "oracle"
    provenance = "INF"

    def __init__(self, m: int = 16, oversample: int = 2, rank: str = "none", max_measured: float = 8.0):
        if m < 2 or oversample < 1 or rank not in ("none", "variance") or max_measured <= 0:
            raise ValueError("oracle: need m >= 2, oversample >= 1, rank in {'none', 'variance'}, max_measured > 0")
        self.m, self.oversample, self.rank = int(m), int(oversample), rank
        self.max_measured = float(max_measured)  # candidates measured per step, in units of B
        self._step: int | None = None
        self._measured_step = 0
        self.measured_total = 0
        self.skipped_total = 0

    def measure(self, prompts: list[Prompt], ctx: StepContext) -> np.ndarray:
        """Pass rate of each prompt from m fresh off-budget samples."""
        if ctx.sample is None:
            raise RuntimeError("oracle: needs ctx.sample to measure pass rates")
        groups = ctx.sample([Request(p, self.m, purpose="oracle") for p in prompts])
        by_id = {}
        for g in groups:
            prev = by_id.get(g.prompt.id)
            c, n = g.num_correct, g.n
            by_id[g.prompt.id] = (c, n) if prev is None else (prev[0] + c, prev[1] + n)
        out = np.full(len(prompts), np.nan)
        for i, p in enumerate(prompts):
            c, n = by_id.get(p.id, (0, 0))
            if n > 0:
                out[i] = c / n
        return out

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        if self._step != ctx.step:
            self._step, self._measured_step = ctx.step, 0
        room = int(self.max_measured * ctx.batch_size) - self._measured_step
        cands = [p for p in candidates if p.id not in ctx.groups][: max(room, 0)]
        if not cands:
            return []
        self._measured_step += len(cands)
        rates = self.measure(cands, ctx)
        ok = (rates > 0.0) & (rates < 1.0)  # NaN (not measured) compares False: skipped
        self.measured_total += len(cands)
        skipped = int(len(cands) - ok.sum())
        self.skipped_total += skipped
        ctx.metrics["skipped"] = ctx.metrics.get("skipped", 0.0) + skipped
        idx = np.flatnonzero(ok)
        if self.rank == "variance":
            v = rates[idx] * (1 - rates[idx])
            idx = idx[np.argsort(-v, kind="stable")]
        return [cands[i] for i in idx]

    def state_dict(self) -> dict:
        return {"measured_total": self.measured_total, "skipped_total": self.skipped_total,
                "step": self._step, "measured_step": self._measured_step}

    def load_state_dict(self, state: dict) -> None:
        self.measured_total = int(state["measured_total"])
        self.skipped_total = int(state["skipped_total"])
        self._step = None if state["step"] is None else int(state["step"])
        self._measured_step = int(state["measured_step"])
