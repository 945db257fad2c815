"""CDAS: Competence-Difficulty Alignment Sampling.

Paper: "Rethinking the Sampling Criteria in Reinforcement Learning for LLM Reasoning: A
Competence-Difficulty Alignment Perspective", arXiv 2505.17652 (AAAI 2026). Code: DeyangKong/CDAS,
verl/utils/dataset/rl_cdas_dataset.py (`CDAS_System`), verl/trainer/ppo/ray_trainer.py L318-660.
Spec: shared/methods/selection-allocation.md §5.

Rule [CODE]:
  * init d_i = 0 for every problem, competence R = 0.
  * after each step, for every problem i rolled out with pass rate pr_i (previous R, d_i):
        p_exp = sigmoid(R - d_i);  s = len(history_i) + 1 with history_i = [0, d_1, ...] (s = k + 2
        at the k+1-th update);  d_i' = ((s-1)/s) d_i + (1/s) (p_exp - pr_i)
    R' = R - (1/N) sum_i (d_i' - d_i) over the rolled-out i, N = pool size (so R == -mean d).
  * selection (deterministic): L = {d_i <= R} by d descending, H = {d_i > R} by d ascending; take the
    first B/2 of each, filling from the other side when one is short.
  * warm-up: the first `warmup_steps` steps use the ordinary dataloader.

Cost [O(B + V) per step instead of the code's O(N log N) sort, V = distinct prompts visited so far
(<= steps x B), independent of the pool size N]: every never-visited prompt has d = 0 exactly, so the
pool splits into a sorted part (the V visited prompts, ranked with one argpartition) and a block of
zeros of known size N - V. Whatever part of the zero block the two halves reach is filled with
never-visited prompts drawn uniformly with `ctx.rng` (rejection sampling; an exact scan once fewer
than 5% of the pool is unvisited, which then costs O(N) = O(V)).
Deviations [INF]: (1) ties inside the zero block are broken at random rather than by dataset order
(the code's `sorted` is stable over insertion order); on a shuffled pool this is the same in
distribution. (2) For odd B the extra prompt goes to H (the code returns 2 * (B // 2), one short).
(3) Refill rounds (e.g. `cdas+dapo`) re-select with the prompts already rolled out this step excluded.
Defaults [CODE srcipts/train_grpo_cdas.sh]: warmup_steps = 1; CDAS has no other knob, so nothing to
scale (the paper's B = 1024 becomes the run's B).
"""
from __future__ import annotations

import numpy as np

from ..core.registry import register
from ..core.types import Batch, Group, Prompt
from .base import Component, StepContext


@register("planner", "cdas", provenance="CODE+INF",
          summary="CDAS: Elo-like difficulty d vs competence R; pick the B/2 nearest below and above R")
class CDAS(Component):
    def __init__(self, warmup_steps: int = 1):
        if warmup_steps < 0:
            raise ValueError("cdas: warmup_steps must be >= 0")
        self.warmup_steps = int(warmup_steps)
        self.R = 0.0
        self.steps = 0  # updates done
        self.N = 0
        self.d: np.ndarray | None = None  # float64 [N]
        self.cnt: np.ndarray | None = None  # int64 [N], updates per problem
        self.vis = np.zeros(0, dtype=np.int64)  # visited ids, in first-visit order

    def bind(self, pool_size: int) -> None:
        self.N = int(pool_size)
        self.d = np.zeros(self.N, dtype=np.float64)
        self.cnt = np.zeros(self.N, dtype=np.int64)

    # ---- the update ----------------------------------------------------------------------
    def update(self, ids, pass_rates) -> None:
        """One CDAS step over the problems rolled out (ids unique)."""
        ids = np.asarray(ids, dtype=np.int64)
        pr = np.asarray(pass_rates, dtype=np.float64)
        if len(ids) == 0:
            return
        d_old = self.d[ids]
        p_exp = 1.0 / (1.0 + np.exp(d_old - self.R))
        s = self.cnt[ids] + 2.0
        d_new = (s - 1.0) / s * d_old + (p_exp - pr) / s
        new = ids[self.cnt[ids] == 0]
        self.d[ids] = d_new
        self.cnt[ids] += 1
        if len(new):
            self.vis = np.concatenate([self.vis, new])
        self.R = float(self.R - (d_new - d_old).sum() / self.N)
        self.steps += 1

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        seen: dict[int, Group] = {}
        for g in groups:
            if g.n > 0:
                seen[g.prompt.id] = g
        self.update(list(seen), [g.pass_rate for g in seen.values()])
        ctx.metrics["cdas_competence"] = self.R

    # ---- the selection -------------------------------------------------------------------
    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        if self.steps < self.warmup_steps or need <= 0:
            return candidates
        ids = self.choose(need, exclude=set(ctx.groups), rng=ctx.rng)
        return [ctx.pool[i] for i in ids]

    def choose(self, need: int, exclude: set[int], rng: np.random.Generator) -> list[int]:
        R = self.R
        vis = self.vis
        if exclude and len(vis):
            vis = vis[~np.isin(vis, np.fromiter(exclude, dtype=np.int64, count=len(exclude)))]
        dv = self.d[vis]
        low_ids, low_d = vis[dv <= R], dv[dv <= R]
        high_ids, high_d = vis[dv > R], dv[dv > R]
        n_excl_unvisited = sum(1 for i in exclude if self.cnt[i] == 0)
        n_zero = self.N - len(self.vis) - n_excl_unvisited  # unvisited prompts available, d = 0
        zero_low = 0.0 <= R
        n_low = len(low_ids) + (n_zero if zero_low else 0)
        n_high = len(high_ids) + (0 if zero_low else n_zero)
        half = need // 2
        k_low = min(half, n_low)
        k_high = min(need - k_low, n_high)
        k_low = min(need - k_high, n_low)
        low = self._nearest(low_ids, low_d, k_low, descending=True, zeros=n_zero if zero_low else 0)
        high = self._nearest(high_ids, high_d, k_high, descending=False, zeros=0 if zero_low else n_zero)
        n_fill = sum(1 for i in low + high if i < 0)
        fill = iter(self._unvisited(n_fill, exclude, rng))
        return [next(fill) if i < 0 else i for i in low + high]

    @staticmethod
    def _nearest(ids, d, k, descending: bool, zeros: int) -> list[int]:
        """The first k of (ids by d, plus `zeros` virtual entries with d = 0 shown as -1)."""
        if k <= 0:
            return []
        key = -d if descending else d
        if len(ids) > k:
            part = np.argpartition(key, k - 1)[:k]
            ids, d, key = ids[part], d[part], key[part]
        z = min(zeros, k)
        all_ids = np.concatenate([ids, -np.ones(z, dtype=np.int64)])
        all_key = np.concatenate([key, np.zeros(z)])
        order = np.argsort(all_key, kind="stable")[:k]
        return [int(i) for i in all_ids[order]]

    def _unvisited(self, k: int, exclude: set[int], rng: np.random.Generator) -> list[int]:
        if k <= 0:
            return []
        out: list[int] = []
        taken = set(exclude)
        unvisited_frac = (self.N - len(self.vis)) / max(self.N, 1)
        if unvisited_frac >= 0.05:
            for _ in range(64):
                cand = rng.integers(0, self.N, size=max(2 * k, 16))
                for i in cand[self.cnt[cand] == 0]:
                    i = int(i)
                    if i not in taken:
                        out.append(i)
                        taken.add(i)
                        if len(out) == k:
                            return out
        pool = np.flatnonzero(self.cnt == 0)
        pool = pool[~np.isin(pool, np.fromiter(taken, dtype=np.int64, count=len(taken)))] if taken else pool
        out += [int(i) for i in rng.permutation(pool)[: k - len(out)]]
        return out

    # ---- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        vis = self.vis.copy()
        return {"R": self.R, "steps": self.steps, "N": self.N, "vis": vis,
                "d_vis": (self.d[vis].copy() if self.d is not None else np.zeros(0)),
                "cnt_vis": (self.cnt[vis].copy() if self.cnt is not None else np.zeros(0, np.int64))}

    def load_state_dict(self, state: dict) -> None:
        self.R, self.steps = float(state["R"]), int(state["steps"])
        self.vis = np.asarray(state["vis"], dtype=np.int64).copy()
        if int(state["N"]) > 0:
            if int(state["N"]) != self.N:
                raise ValueError(f"cdas: state is for a pool of {state['N']} prompts, the pool has {self.N}")
            self.bind(self.N)
            self.d[self.vis] = np.asarray(state["d_vis"], dtype=np.float64)
            self.cnt[self.vis] = np.asarray(state["cnt_vis"], dtype=np.int64)
