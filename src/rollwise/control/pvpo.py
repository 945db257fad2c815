"""PVPO, the planner half: reference pre-sampling ("PVPO: Pre-Estimated Value-Based Policy
Optimization for Agentic Reasoning", Feng et al., arXiv 2508.21104, ACL Findings 2026; no official
code; cross-checked in the spec against Wodlfvllf/grpo-composer).

Before training, the reference policy rolls out M responses per prompt. Their mean reward is a
static value anchor V(x) for the advantage A_i = r_i - V(x) (the advantage "pvpo", written
separately, reads it from AdvInput.ref_pass_rate_G), and their accuracy selects the data.

Rule ([SEC]: emergentmind / liner reviews and the ACL abstract; [INF] where marked)::

    setup: M reference rollouts per prompt -> acc(x) = V(x)          (ledger purpose "profile")
    filter (select): drop acc = 1 (trivial); keep 0 < acc < 1;
                     acc = 0: PVPO injects a ground-truth trajectory from a larger LLM
    anchor (finish): every group carries its prompt's V(x) to the learner
    refresh: "reference model updates at fixed steps" [SEC]

How V(x) reaches the learner: the component keeps V in a pool-sized array (`ref_rate`,
NaN = not profiled; `ref_pass_rate(ids)` reads it) and, in finish, sets the attribute
`group.ref_pass_rate` (a float) on every group of the step. The learner should build
`AdvInput.ref_pass_rate_G = tensor([getattr(g, "ref_pass_rate", nan) for g in batch.groups])`.
rollwise's Learner does not do this yet; the cleanest API change is a `meta: dict` field on Group
(or `Batch.ref_pass_rate_G`) that the learner copies into AdvInput.

Deviations [INF]:
  * The reference policy is the policy at setup (the initial policy, = the usual reference
    model). ctx.sample has no policy argument, so lazy=True (profile a prompt when first drawn:
    O(batch) per step, for huge pools) and refresh_every > 0 (re-profile a drawn prompt whose V
    is refresh_every steps old, lazily) use the *current* policy as the refreshed reference.
  * Ground-truth injection for acc = 0 prompts needs a larger model; it is not implemented.
    zero_acc="keep" (default) trains them with V = 0 (the anchor is then r_i itself, so only a
    success moves the policy); zero_acc="drop" skips them.
  * refresh_every = 0 by default: V is static, as in the abstract's "Static V". T_ref is unknown.

Defaults [INF; M unknown, the composer config's n = 4 is not authoritative]: M = 8 = the embedded
n (a V precise to 1/8; profiling costs 2000*8 = 16k rollouts, ~40% of a 150-step GRPO run at
B=32, n=8, charged to the ledger as "profile").
"""
from __future__ import annotations

import numpy as np

from ..core.registry import register
from ..core.types import Group, Prompt, Request
from .base import Component, StepContext


@register("planner", "pvpo", provenance="SEC+INF",
          summary="PVPO: reference pre-sampling -> drop solved prompts; V(x) anchor for advantage 'pvpo'")
class PVPO(Component):
    name = "pvpo"
    provenance = "SEC+INF"

    def __init__(self, ref_k: int = 8, drop_solved: bool = True, zero_acc: str = "keep",
                 refresh_every: int = 0, lazy: bool = False, chunk: int = 1024):
        if ref_k < 1 or refresh_every < 0 or chunk < 1:
            raise ValueError("pvpo: need ref_k >= 1, refresh_every >= 0, chunk >= 1")
        if zero_acc not in ("keep", "drop"):
            raise ValueError(f"pvpo: zero_acc must be 'keep' or 'drop', not {zero_acc!r}")
        self.ref_k, self.drop_solved, self.zero_acc = int(ref_k), bool(drop_solved), zero_acc
        self.refresh_every, self.lazy, self.chunk = int(refresh_every), bool(lazy), int(chunk)
        self.ref_rate: np.ndarray | None = None  # V(x) per pool prompt, NaN = not profiled
        self.ref_step: np.ndarray | None = None  # step at which V(x) was measured

    # ---- state access ---------------------------------------------------------------------------
    def ref_pass_rate(self, ids) -> np.ndarray:
        """V(x) of the given prompt ids (NaN where not profiled)."""
        if self.ref_rate is None:
            return np.full(len(np.atleast_1d(ids)), np.nan, np.float32)
        return self.ref_rate[np.asarray(ids, dtype=np.int64)]

    def _ensure(self, size: int) -> None:
        if self.ref_rate is None or len(self.ref_rate) != size:
            self.ref_rate = np.full(size, np.nan, np.float32)
            self.ref_step = np.full(size, -1, np.int64)

    def profile(self, prompts: list[Prompt], ctx: StepContext) -> None:
        if ctx.sample is None:
            raise RuntimeError("pvpo needs ctx.sample for reference pre-sampling")
        for start in range(0, len(prompts), self.chunk):
            reqs = [Request(p, self.ref_k, purpose="profile") for p in prompts[start: start + self.chunk]]
            for g in ctx.sample(reqs):
                self.ref_rate[g.prompt.id] = g.pass_rate
                self.ref_step[g.prompt.id] = ctx.step

    def keep(self, v: float) -> bool:
        if np.isnan(v):
            return True
        if self.drop_solved and v >= 1.0:
            return False
        if self.zero_acc == "drop" and v <= 0.0:
            return False
        return True

    # ---- hooks ---------------------------------------------------------------------------------
    def setup(self, ctx: StepContext) -> None:
        self._ensure(len(ctx.pool))
        if self.lazy or not np.isnan(self.ref_rate).all():  # lazy, or resumed from a checkpoint
            return
        self.profile(list(ctx.pool), ctx)
        ctx.metrics["pvpo/ref_mean"] = float(np.nanmean(self.ref_rate)) if len(self.ref_rate) else 0.0
        ctx.metrics["pvpo/solved_frac"] = float((self.ref_rate >= 1.0).mean()) if len(self.ref_rate) else 0.0

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        self._ensure(len(ctx.pool))
        if not candidates:
            return candidates
        ids = np.array([p.id for p in candidates], dtype=np.int64)
        stale = np.isnan(self.ref_rate[ids]) if self.lazy else np.zeros(len(ids), bool)
        if self.refresh_every > 0:
            stale |= (self.ref_step[ids] >= 0) & (ctx.step - self.ref_step[ids] >= self.refresh_every)
        if stale.any():
            self.profile([p for p, s in zip(candidates, stale) if s], ctx)
            ctx.metrics["pvpo/profiled"] = ctx.metrics.get("pvpo/profiled", 0.0) + float(stale.sum())
        out = [p for p in candidates if self.keep(float(self.ref_rate[p.id]))]
        ctx.metrics["pvpo/filtered"] = ctx.metrics.get("pvpo/filtered", 0.0) + len(candidates) - len(out)
        return out

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        self._ensure(len(ctx.pool))
        missing = [g.prompt for g in groups if np.isnan(self.ref_rate[g.prompt.id])]
        if missing and ctx.sample is not None:  # a prompt added by a later selector: profile it now
            self.profile(missing, ctx)
        vals = []
        for g in groups:
            v = float(self.ref_rate[g.prompt.id])
            g.ref_pass_rate = v  # read by the learner into AdvInput.ref_pass_rate_G (see docstring)
            vals.append(v)
        if vals and not np.isnan(vals).all():
            ctx.metrics["pvpo/batch_ref_mean"] = float(np.nanmean(vals))
        return groups

    # ---- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"ref_rate": None if self.ref_rate is None else self.ref_rate.copy(),
                "ref_step": None if self.ref_step is None else self.ref_step.copy()}

    def load_state_dict(self, s: dict) -> None:
        self.ref_rate = None if s["ref_rate"] is None else np.asarray(s["ref_rate"], np.float32).copy()
        self.ref_step = None if s["ref_step"] is None else np.asarray(s["ref_step"], np.int64).copy()
