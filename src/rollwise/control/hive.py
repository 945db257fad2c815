"""HIVE: History-Informed and online-VErified prompt selection (two stages, before rollout).

Paper: "HIVE: History-Informed and online-VErified prompt selection" (v2 retitled "Train at the
Moving Edge..."), arXiv 2603.25184 (abstracts only; no code found). Spec:
shared/methods/selection-allocation.md §3.

Known [ABS]: stage 1 is a coarse filter on historical reward statistics with response entropy as a
cheap prior; stage 2 uses the current policy's *prompt entropy* as a real-time proxy to prune
prompts whose historical utility is stale. Target: the "learning edge" (intermediate difficulty x
high uncertainty). EVERYTHING BELOW THAT SKELETON IS INFERRED [INF] (spec §3 (c)):
  stage 1, for each candidate x:
      no history -> keep (explore)
      else p = EMA of its pass rate (ema = 1: the last visit's), H = mean token entropy of its last
           responses (PromptHistory.last_entropy), u_hist = p (1 - p) * H / mean(H over the history
           candidates); candidates outside [p_lo, p_hi] are dropped; of the rest the top
           ceil(rho1 * count) by u_hist are kept (ties broken at random).
  stage 2, for the survivors:
      H_prompt(x) = mean over prompt tokens of the entropy of pi_theta(. | x_<t): one prefill-only
           pass (`ctx.prompt_stats`), its prompt tokens charged by the driver.
      drop x if H_prompt fell by more than `delta` (relative) since x's last visit (stale history);
      rank the rest by H_prompt, highest first; the Planner keeps the first `need`.
Defaults [INF; the paper's values are unknown]: rho1 = 0.5, window [0, 1] (off), delta = 0.2,
ema = 1.0, oversample = 2 (candidates drawn per needed prompt, so stage 2 chooses B of ~B..2B).
Cost: O(candidates) per step plus one prefill of <= oversample x B prompts; per-prompt state is
sparse (the EMA and the prompt entropy at the last visit of visited prompts).
"""
from __future__ import annotations

import math

import numpy as np

from ..core.registry import register
from ..core.types import Batch, Group, Prompt
from .base import Component, StepContext
from .capabilities import PromptStats


@register("planner", "hive", provenance="ABS+INF",
          summary="HIVE: history filter (p(1-p) x response entropy) then prompt-entropy ranking / stale pruning")
class HIVE(Component):
    declares = (PromptStats(),)
    needs_policy = True  # prompt entropy

    def __init__(self, rho1: float = 0.5, p_lo: float = 0.0, p_hi: float = 1.0, delta: float = 0.2,
                 ema: float = 1.0, oversample: int = 2):
        if not 0 < rho1 <= 1 or not 0 <= p_lo <= p_hi <= 1 or delta < 0 or not 0 < ema <= 1 or oversample < 1:
            raise ValueError("hive: need 0 < rho1 <= 1, 0 <= p_lo <= p_hi <= 1, delta >= 0, 0 < ema <= 1, oversample >= 1")
        self.rho1, self.p_lo, self.p_hi, self.delta = float(rho1), float(p_lo), float(p_hi), float(delta)
        self.ema, self.oversample = float(ema), int(oversample)
        self.p_ema: dict[int, float] = {}  # EMA pass rate (only used when ema < 1)
        self.h_prompt: dict[int, float] = {}  # prompt entropy at the last visit
        self._pending: dict[int, float] = {}  # prompt entropy measured this step, by id

    # ---- stage 1 -------------------------------------------------------------------------
    def _pass_rate(self, ids: np.ndarray, ctx: StepContext) -> np.ndarray:
        if self.ema >= 1.0:
            return ctx.history.last_pass_rate(ids)
        last = ctx.history.last_pass_rate(ids)
        return np.array([self.p_ema.get(int(i), l) for i, l in zip(ids, last)], dtype=np.float64)

    def stage1(self, candidates: list[Prompt], ctx: StepContext) -> list[Prompt]:
        ids = np.fromiter((p.id for p in candidates), dtype=np.int64, count=len(candidates))
        seen = ctx.history.visits[ids] > 0
        keep = ~seen
        hist = np.flatnonzero(seen)
        if len(hist):
            p = self._pass_rate(ids[hist], ctx)
            H = ctx.history.last_entropy[ids[hist]].astype(np.float64)
            Hn = H / H.mean() if H.mean() > 0 else np.ones_like(H)
            u = p * (1.0 - p) * Hn
            ok = (p >= self.p_lo) & (p <= self.p_hi)
            hist, u = hist[ok], u[ok]
            k = int(math.ceil(self.rho1 * len(hist)))
            if k:
                tie = ctx.rng.random(len(hist))
                order = np.lexsort((tie, -u))[:k]
                keep[hist[order]] = True
        ctx.metrics["skipped"] = ctx.metrics.get("skipped", 0.0) + float((~keep).sum())
        return [c for c, k in zip(candidates, keep) if k]

    # ---- stage 2 -------------------------------------------------------------------------
    def stage2(self, prompts: list[Prompt], ctx: StepContext) -> list[Prompt]:
        if not prompts:
            return prompts
        if ctx.prompt_stats is None:
            raise RuntimeError("hive: stage 2 needs ctx.prompt_stats (prompt entropy from the policy)")
        texts = [p.text for p in prompts]
        ent, _ = ctx.prompt_stats(texts)
        ent = np.asarray(ent, dtype=np.float64)
        keep = []
        stale = 0
        for p, h in zip(prompts, ent):
            self._pending[p.id] = float(h)
            last = self.h_prompt.get(p.id)
            if last is not None and last > 0 and (last - h) / last > self.delta:
                stale += 1
                continue
            keep.append((h, p))
        ctx.metrics["hive_stale"] = ctx.metrics.get("hive_stale", 0.0) + stale
        keep.sort(key=lambda t: -t[0])  # stable: equal entropies keep the draw order
        return [p for _, p in keep]

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        if not candidates:
            return candidates
        return self.stage2(self.stage1(candidates, ctx), ctx)

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        for g in groups:
            if g.n == 0:
                continue
            pid = g.prompt.id
            if pid in self._pending:
                self.h_prompt[pid] = self._pending[pid]
            if self.ema < 1.0:
                prev = self.p_ema.get(pid)
                pr = float(g.pass_rate)
                self.p_ema[pid] = pr if prev is None else (1 - self.ema) * prev + self.ema * pr
        self._pending = {}

    # ---- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"p_ema": {int(k): float(v) for k, v in self.p_ema.items()},
                "h_prompt": {int(k): float(v) for k, v in self.h_prompt.items()},
                "pending": {int(k): float(v) for k, v in self._pending.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.p_ema = {int(k): float(v) for k, v in state["p_ema"].items()}
        self.h_prompt = {int(k): float(v) for k, v in state["h_prompt"].items()}
        self._pending = {int(k): float(v) for k, v in state["pending"].items()}
