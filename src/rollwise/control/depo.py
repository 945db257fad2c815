"""DEPO (online phase): prune low-explorability prompts before rollout, replay under-explored ones.

Paper: "Towards High Data Efficiency in Reinforcement Learning with Verifiable Reward" (DEPO, Data-
Efficient Policy Optimization), arXiv 2509.01321, ICLR 2026. Code: txy77/DEPO,
verl/trainer/rollout_purning/rollout_purning.py::purning_by_entropy and the history updates in
verl/trainer/ppo/ray_trainer.py. Spec: shared/methods/selection-allocation.md §16. (Not the
"dual-efficiency DEPO".) The offline phase (PageRank-weighted DPP + difficulty-normal subsampling,
[SEC]) is not part of this component.

Rule [CODE]:
  * epoch 0: no pruning. Prompts with no history are always kept.
  * every visit of a prompt gets an explorability score: with c correct and w wrong of n,
    mu = c/n, sd = std (population), A+ = (1-mu)/(sd+eps), A- = -mu/(sd+eps), H_c = mean token
    entropy of each correct response, Hbar_c = their mean (0 if none),
        E = sum_correct |A+| H_c + sum_{wrong with H_w <= k_neg Hbar_c} |A-| H_w
    (all-correct / all-wrong visits score 0). A prompt's score = mean over its last K visits.
  * sort the visited candidates by (score desc, times explored asc); keep the top
    floor(rho_e x count), rho_e = clip(rho0 - d x epoch, 0.4, 1.0); fill the kept count up to a
    multiple of `fill_multiple` (#GPUs in the code) from the rest, least-explored first.
  * pruned prompts are not rolled out this step (fewer rollouts per step; that is the saving).
Replay of under-explored samples [ABS says it exists; INF how: the public code has only the
least-explored fill]: a pruned prompt's score is never refreshed (no new visit), so a plain filter
would prune it every epoch forever. A prompt pruned `replay_after` times in a row is instead rolled
out on its next draw ("replayed"), refreshing its score; that is the "ensure adequate training".
Implementation note [API]: the pruned prompts are returned by `select` (so the Planner does not
draw the whole pool to fill B) and given n = 0 in `allocate`, which the Planner drops. "epoch" is
counted from the candidates this component has seen (its share of the epoch-shuffled sampler), which
is exact when DEPO is the first selector. Code quirk fixed: the code indexes its selection by
positions in a de-duplicated id list instead of batch rows (spec §16 (f)); here it is by prompt.
Defaults: K = 3, k_neg = 1.5, rho0 = 1.0, floor 0.4 [CODE ppo_trainer.yaml]; decay d scaled from
0.03 / epoch to 0.25 / epoch [INF]: the code's schedule takes 20 epochs to reach the 0.4 floor,
the embedded default runs ~2.4 epochs (150 steps x 32 / 2000 prompts), so at 0.03 the filter would
barely act (rho >= 0.94); at 0.25 it keeps 75% in epoch 1 and 50% in epoch 2. fill_multiple = 1
(one device), replay_after = 2 [INF]. Cost: O(candidates + groups x n) per step; per-prompt state
is sparse (last K visit scores of visited prompts, pruned streaks).
"""
from __future__ import annotations

import numpy as np

from ..core.registry import register
from ..core.types import Batch, Group, Prompt
from .base import Component, StepContext
from .capabilities import HoldsBack


def explorability(correct: np.ndarray, entropy: np.ndarray, k_neg: float = 1.5, eps: float = 1e-8) -> float:
    """DEPO's per-visit explorability score E of one group (see the module docstring)."""
    correct = np.asarray(correct, dtype=bool)
    entropy = np.asarray(entropy, dtype=np.float64)
    if len(correct) == 0:
        return 0.0
    acc = correct.astype(np.float64)
    mu, sd = acc.mean(), acc.std()
    a_pos = (1.0 - mu) / (sd + eps)
    a_neg = (0.0 - mu) / (sd + eps)
    h_c = entropy[correct]
    h_w = entropy[~correct]
    hbar_c = h_c.mean() if len(h_c) else 0.0
    h_w = h_w[h_w <= k_neg * hbar_c]
    return float(np.abs(a_pos * h_c).sum() + np.abs(a_neg * h_w).sum())


@register("planner", "depo", provenance="CODE+INF",
          summary="DEPO online: keep the top rho_e by explorability (|A| x entropy history), replay under-explored prompts")
class DEPO(Component):
    declares = (HoldsBack(),)

    def __init__(self, history_k: int = 3, neg_pos_ratio: float = 1.5, rho0: float = 1.0, decay: float = 0.25,
                 rho_floor: float = 0.4, fill_multiple: int = 1, replay_after: int = 2):
        if history_k < 1 or not 0 < rho_floor <= 1 or fill_multiple < 1 or replay_after < 1:
            raise ValueError("depo: need history_k >= 1, 0 < rho_floor <= 1, fill_multiple >= 1, replay_after >= 1")
        self.K, self.k_neg = int(history_k), float(neg_pos_ratio)
        self.rho0, self.decay, self.rho_floor = float(rho0), float(decay), float(rho_floor)
        self.fill_multiple, self.replay_after = int(fill_multiple), int(replay_after)
        self.scores: dict[int, list[float]] = {}  # last K visit scores
        self.pruned_streak: dict[int, int] = {}
        self.seen = 0  # candidates seen (epoch counter)
        self._prune: set[int] = set()  # pruned in the current draw, for allocate

    def rho(self, epoch: int) -> float:
        return float(min(1.0, max(self.rho_floor, self.rho0 - self.decay * epoch)))

    def score(self, pid: int) -> float:
        s = self.scores.get(pid)
        return float(np.mean(s)) if s else 0.0

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        if not candidates:
            return candidates
        epoch = self.seen // max(len(ctx.pool), 1)
        self.seen += len(candidates)
        visits = ctx.history.visits
        fresh = [p for p in candidates if p.id not in self.scores]
        scored = [p for p in candidates if p.id in self.scores]
        if epoch == 0 or not scored:
            self._prune = set()
            return candidates
        rows = sorted(((-self.score(p.id), int(visits[p.id]), i) for i, p in enumerate(scored)))
        ranked = [scored[i] for _, _, i in rows]
        top = int(len(ranked) * self.rho(epoch))
        kept, rest = ranked[:top], ranked[top:]
        # fill to a multiple of fill_multiple, least-explored first (the code's only "replay")
        rest.sort(key=lambda p: (int(visits[p.id]), -self.score(p.id)))
        n_keep = len(fresh) + len(kept)
        extra = (-n_keep) % self.fill_multiple
        kept += rest[:extra]
        rest = rest[extra:]
        # replay [INF]: a prompt pruned `replay_after` times in a row is rolled out this time
        replay = [p for p in rest if self.pruned_streak.get(p.id, 0) + 1 >= self.replay_after]
        pruned = [p for p in rest if self.pruned_streak.get(p.id, 0) + 1 < self.replay_after]
        for p in pruned:
            self.pruned_streak[p.id] = self.pruned_streak.get(p.id, 0) + 1
        for p in kept + replay:
            self.pruned_streak.pop(p.id, None)
        self._prune = {p.id for p in pruned}
        ctx.metrics["skipped"] = ctx.metrics.get("skipped", 0.0) + len(pruned)
        ctx.metrics["depo_replayed"] = ctx.metrics.get("depo_replayed", 0.0) + len(replay)
        ctx.metrics["depo_rho"] = self.rho(epoch)
        # pruned prompts go last: n = 0 in allocate drops them (see the module docstring)
        return fresh + kept + replay + pruned

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        prune, self._prune = self._prune, set()
        return [0 if p.id in prune else k for p, k in zip(prompts, ns)]

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        for g in groups:
            if g.n == 0:
                continue
            e = explorability([r.correct for r in g.rollouts], [r.entropy for r in g.rollouts], self.k_neg)
            s = self.scores.setdefault(g.prompt.id, [])
            s.append(e)
            del s[: -self.K]

    def state_dict(self) -> dict:
        return {"scores": {int(k): [float(x) for x in v] for k, v in self.scores.items()},
                "pruned_streak": {int(k): int(v) for k, v in self.pruned_streak.items()},
                "seen": self.seen, "prune": sorted(int(x) for x in self._prune)}

    def load_state_dict(self, state: dict) -> None:
        self.scores = {int(k): [float(x) for x in v] for k, v in state["scores"].items()}
        self.pruned_streak = {int(k): int(v) for k, v in state["pruned_streak"].items()}
        self.seen = int(state["seen"])
        self._prune = {int(x) for x in state["prune"]}
