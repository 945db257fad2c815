"""sGPO: sorted Group Policy Optimization (Red Hat / IBM, arXiv 2606.08854; abstract only, no code).

One cheap offline profiling pass under the initial policy drives three decisions: which queries to
train on, how many responses each gets, and in which order they come.

Rule ([ABS] structure; [INF] constants, none are published)::

    profile:    K samples per query under pi_0 -> p0(x)          (setup; ledger purpose "profile")
    filter:     drop trivial queries, p0 >= p_trivial; keep a random fraction rho of p0 = 0
    group size: G(x) = clip(ceil(1 / p0(x)), G_min, G_max); p0 = 0 -> G_max
    curriculum: train queries in order of p0 descending (easy -> hard), ties shuffled; the
                order is replayed every epoch (ties reshuffled)
    p0 is static: it is never updated online [ABS: "single offline proxy"].

Why G = 1/p [INF]: about one success per group, so P(non-zero-variance) >= 1 - 1/e.

Hook mapping: `setup` profiles the whole pool in chunks of yielded requests (O(pool), once, offline
by design); `select` returns the next `need` queries of the curriculum (the planner's random
candidates are ignored; with curriculum=False it only filters them); `allocate` sets G(x).
Everything per step is O(batch).

Defaults [INF, scaled to the embedded default n = 8, pool ~2000, ~150 steps]: K = 4 (profiling
costs 2000*4 = 8000 rollouts, ~20% of a 150-step GRPO run at B=32, n=8; the paper's claim includes
profiling cost), G_min = 2, G_max = 2n = 16, rho = 0.25, p_trivial = 1.0.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.registry import register
from ..core.types import Prompt, Request
from .base import Component, StepContext
from .capabilities import SetsN


def group_size(p0: float, g_min: int, g_max: int) -> int:
    """G = clip(ceil(1/p0), G_min, G_max); p0 = 0 -> G_max. A 1e-9 guard keeps 1/(1/49) = 49.00000000000001 at 49."""
    if p0 <= 0:
        return int(g_max)
    return int(min(max(math.ceil(1.0 / p0 - 1e-9), g_min), g_max))


@register("planner", "sgpo", provenance="ABS+INF",
          summary="sGPO: offline pass-rate profile -> filter, group size ceil(1/p), easy->hard order")
class SGPO(Component):
    declares = (SetsN(),)
    needs_sampling = True  # the offline profile

    def __init__(self, profile_k: int = 4, g_min: int = 2, g_max: int = 16, rho: float = 0.25,
                 p_trivial: float = 1.0, curriculum: bool = True, chunk: int = 1024):
        if profile_k < 1 or not 1 <= g_min <= g_max or not 0.0 <= rho <= 1.0 or chunk < 1:
            raise ValueError("sgpo: need profile_k >= 1, 1 <= g_min <= g_max, 0 <= rho <= 1, chunk >= 1")
        self.profile_k, self.g_min, self.g_max = int(profile_k), int(g_min), int(g_max)
        self.rho, self.p_trivial, self.curriculum, self.chunk = float(rho), float(p_trivial), bool(curriculum), int(chunk)
        self.p0: np.ndarray | None = None  # profiled pass rate per pool prompt (float32)
        self.kept: np.ndarray | None = None  # bool per pool prompt
        self.order = np.zeros(0, dtype=np.int64)  # curriculum order of kept ids
        self.cursor = 0
        self.epoch = 0

    # ---- rule pieces ----------------------------------------------------------------------------
    def filter(self, p0: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        keep = p0 < self.p_trivial
        zero = p0 <= 0
        keep[zero] = rng.random(int(zero.sum())) < self.rho
        return keep

    def make_order(self, rng: np.random.Generator) -> np.ndarray:
        """Kept ids by p0 descending; equal p0 in random order."""
        ids = np.flatnonzero(self.kept)
        ids = ids[rng.permutation(len(ids))]
        return ids[np.argsort(-self.p0[ids], kind="stable")]

    def set_profile(self, p0: np.ndarray, rng: np.random.Generator) -> None:
        self.p0 = np.asarray(p0, dtype=np.float32)
        self.kept = self.filter(self.p0.copy(), rng)
        self.order = self.make_order(rng)
        self.cursor, self.epoch = 0, 0

    # ---- hooks ---------------------------------------------------------------------------------
    def setup(self, ctx: StepContext):
        if self.p0 is not None:  # resumed from a checkpoint
            return
        p0 = np.zeros(len(ctx.pool), dtype=np.float32)
        for start in range(0, len(ctx.pool), self.chunk):
            reqs = [Request(p, self.profile_k, purpose="profile") for p in ctx.pool[start: start + self.chunk]]
            for g in (yield reqs):
                p0[g.prompt.id] = g.pass_rate
        self.set_profile(p0, ctx.rng)
        ctx.metrics["sgpo/kept_frac"] = float(self.kept.mean()) if len(self.kept) else 0.0
        ctx.metrics["sgpo/p0_mean"] = float(p0.mean()) if len(p0) else 0.0

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        if self.kept is None:
            return candidates
        if not self.curriculum:
            return [p for p in candidates if self.kept[p.id]]
        if len(self.order) == 0:
            return []
        out = []
        for _ in range(min(need, len(self.order))):
            if self.cursor >= len(self.order):
                self.epoch += 1
                self.cursor = 0
                self.order = self.make_order(ctx.rng)
            out.append(ctx.pool[int(self.order[self.cursor])])
            self.cursor += 1
        return out

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        if self.p0 is None:
            return ns
        return [group_size(float(self.p0[p.id]), self.g_min, self.g_max) for p in prompts]

    # ---- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"p0": None if self.p0 is None else self.p0.copy(),
                "kept": None if self.kept is None else self.kept.copy(),
                "order": self.order.copy(), "cursor": self.cursor, "epoch": self.epoch}

    def load_state_dict(self, s: dict) -> None:
        self.p0 = None if s["p0"] is None else np.asarray(s["p0"], dtype=np.float32)
        self.kept = None if s["kept"] is None else np.asarray(s["kept"], dtype=bool)
        self.order = np.asarray(s["order"], dtype=np.int64)
        self.cursor, self.epoch = int(s["cursor"]), int(s["epoch"])
