"""GRESO: pre-rollout probabilistic skipping of prompts that were zero-variance in a row.

Paper: Zheng et al., "Act Only When It Pays: Efficient Reinforcement Learning for LLM Reasoning via
Selective Rollouts" (GRESO, GRPO with Efficient Selective Rollout), arXiv 2506.02177 (the id is from
the official README; the spec gives none). Code: Infini-AI-Lab/GRESO. Spec: selection-allocation.md §2.

Rule [CODE: verl/trainer/ttis/presampling_selector.py `filter_examples_all_probabilistic`,
verl/trainer/ppo/ray_trainer.py L925-1230]:
  * pre-rollout, a candidate whose last z_e visits were all-correct is skipped with probability
    1 - max(p_easy ** z_e, 0.01); one whose last z_h visits were all-wrong with 1 - max(p_hard ** z_h,
    0.01). z = 0 (no history, or a mixed last group) never skips.
  * the survivors are rolled out; zero-variance groups are dropped and fresh prompts drawn until B
    groups are kept (DAPO dynamic sampling, which GRESO's trainer runs; `dynamic_sampling=True`).
  * after each step (only once the filter is active, "epoch > 0" in the code):
    easy_ratio, hard_ratio = fractions of all-correct / all-wrong groups among the prompts rolled out
    this step; p_easy -= dp if easy_ratio >= tau/3 else += dp; p_hard -= dp if hard_ratio >= 2 tau/3
    else += dp; both clipped to [0.05, 0.95]. (Hard prompts get 2/3 of the zero-variance target
    because they are "more likely to change".)

Mapping to rollwise:
  * the per-prompt trace is PromptHistory: z_e = `easy_streak`, z_h = `hard_streak` (consecutive
    most-recent all-correct / all-wrong visits). GRESO's code counts mean reward >= 0.98 / <= 0.11 on
    its 1 / 0.1 / 0 reward scale; on rollwise's correct/incorrect booleans that is exactly
    "all correct" / "all wrong" [CODE, normalised as §0 asks].
  * "epoch > 0" [INF, equivalent under the epoch-shuffled PoolSampler]: p is updated after a step in
    which at least one candidate had a trace. In epoch 0 no candidate has one; from epoch 1 on all do.
    This needs no view of the sampler and stays right for pools of any size.
  * GRESO's adaptive sampling batch (B_samp = clip(1.25 (B n - collected) / (1 - zv_frac) / n, 64,
    384), i.e. over-drawing prompts per round to absorb the expected zero-variance ones) is NOT
    reproduced [deviation]: the Planner's refill draws exactly the deficit B - kept each round and
    `select` cannot return more than `need` prompts. Rollout counts are unaffected or lower (no
    surplus groups to discard); only the number of generation rounds per step can be higher.
    API change that would help: a per-component `draw_factor(need, ctx) -> float` (or letting
    `select` return more than `need`) so a selector can size its own generation round.

Defaults [CODE: train-scripts/math_qwen_1_5b_dm_greso.sh]: p_easy = p_hard = 0.5, tau = 0.25,
dp = 0.01, p in [0.05, 0.95], floor 0.01. These are per-step quantities independent of pool and
batch size, so they are kept unscaled for the embedded default (~150 steps is enough for p to move
across its range). max_rounds = 5 [INF]: rollwise's DAPO default (GRESO's own round limit comes
from its adaptive B_samp / last_round logic, which is not reproduced, see above).
Cost: O(candidates) per step; nothing is O(pool).
"""
from __future__ import annotations

import numpy as np

from ..core.registry import register
from ..core.types import Batch, Group, Prompt
from .base import Component, StepContext


@register("planner", "greso", provenance="CODE+INF",
          summary="GRESO: skip prompts that were zero-variance z times in a row with prob 1-max(p^z,.01); adaptive p; DS refill")
class GRESO(Component):
    def __init__(self, p_easy: float = 0.5, p_hard: float = 0.5, target_zero_variance: float = 0.25,
                 delta_p: float = 0.01, p_min: float = 0.05, p_max: float = 0.95, floor: float = 0.01,
                 dynamic_sampling: bool = True, max_rounds: int = 5):
        if not (0 < p_min <= p_max < 1) or not (0 <= floor <= 1) or max_rounds < 1:
            raise ValueError("greso: need 0 < p_min <= p_max < 1, 0 <= floor <= 1, max_rounds >= 1")
        self.p_easy, self.p_hard = float(p_easy), float(p_hard)
        self.tau, self.delta_p = float(target_zero_variance), float(delta_p)
        self.p_min, self.p_max, self.floor = float(p_min), float(p_max), float(floor)
        self.refill = bool(dynamic_sampling)
        self.max_rounds = int(max_rounds)
        self._active = False  # some candidate of this step had a trace ("epoch > 0")
        self.skipped_total = 0

    # ---- the rule ------------------------------------------------------------------------
    def keep_probability(self, easy_streak: np.ndarray, hard_streak: np.ndarray) -> np.ndarray:
        """Probability that each candidate is rolled out: max(p^z, floor) for a zero-variance streak
        of length z > 0, else 1."""
        ze = np.asarray(easy_streak, dtype=np.float64)
        zh = np.asarray(hard_streak, dtype=np.float64)
        keep = np.ones(ze.shape)
        keep = np.where(ze > 0, np.maximum(self.p_easy ** ze, self.floor), keep)
        keep = np.where(zh > 0, np.maximum(self.p_hard ** zh, self.floor), keep)
        return keep

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        if not candidates:
            return candidates
        ids = np.fromiter((p.id for p in candidates), dtype=np.int64, count=len(candidates))
        h = ctx.history
        if (h.visits[ids] > 0).any():
            self._active = True
        keep_p = self.keep_probability(h.easy_streak[ids], h.hard_streak[ids])
        u = ctx.rng.random(len(ids))
        keep = u >= 1.0 - keep_p  # skip when rand < 1 - max(p^z, floor)
        skipped = int(len(ids) - keep.sum())
        self.skipped_total += skipped
        ctx.metrics["skipped"] = ctx.metrics.get("skipped", 0.0) + skipped
        return [p for p, k in zip(candidates, keep) if k]

    def accept(self, group: Group, ctx: StepContext) -> bool:
        if not self.refill:
            return True
        return group.n == 1 or not group.zero_variance

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        groups = [g for g in groups if g.n > 0]
        if groups and self._active:
            easy = sum(g.num_correct == g.n for g in groups) / len(groups)
            hard = sum(g.num_correct == 0 for g in groups) / len(groups)
            self.p_easy = self._step_p(self.p_easy, easy >= self.tau / 3)
            self.p_hard = self._step_p(self.p_hard, hard >= 2 * self.tau / 3)
        self._active = False
        ctx.metrics["greso_p_easy"] = self.p_easy
        ctx.metrics["greso_p_hard"] = self.p_hard

    def _step_p(self, p: float, too_many_zero_variance: bool) -> float:
        p = p - self.delta_p if too_many_zero_variance else p + self.delta_p
        return float(min(max(p, self.p_min), self.p_max))

    # ---- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"p_easy": self.p_easy, "p_hard": self.p_hard, "active": self._active,
                "skipped_total": self.skipped_total}

    def load_state_dict(self, state: dict) -> None:
        self.p_easy, self.p_hard = float(state["p_easy"]), float(state["p_hard"])
        self._active = bool(state["active"])
        self.skipped_total = int(state["skipped_total"])
