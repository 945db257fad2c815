"""Batch recomposition between Replay and the learner (`--recompose`), registered by name.

Contract: `fn(batch: Batch, gen: torch.Generator, adv: Tensor | None, **options) -> RecomposedBatch`.
A registered *class* is a stateful recomposer (RoRecomp keeps a replay buffer): the learner builds it
once, calls the instance with the same arguments, and keeps its state_dict() in the learner checkpoint.

Group statistics first, recomposition second (spec E4): `adv` holds the advantages of
`batch.rollouts` computed inside the *original* groups ([N], or [N, T] for a token-level estimator).
The learner computes them with its own estimator, `learner.advantage` with `learner.advantage_options`
(and its tracker, e.g. MSSR's baseline), so `--recompose` composes with `--advantage`; setting
`advantage` (and `advantage_options`) in `learner.recompose_options` overrides that estimator for the
whole learner. Called directly with adv=None, a recomposer uses GRPO. Recomposers then reorder, drop or
duplicate rollouts and return a `RecomposedBatch` whose `adv_N` keeps those advantages, aligned with
its own rollouts; the learner never recomputes them over the recomposed groups. Duplicated rollouts
are intentional (spec E5).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..core import registry
from ..core.registry import register
from ..core.types import Batch, Group, Prompt, Rollout
from .advantages import batch_input


@dataclass
class RecomposedBatch(Batch):
    """A Batch whose advantages were computed before recomposition: adv_N is [N] or [N, T] over
    `self.rollouts` (T = the longest response of this batch)."""

    adv_N: torch.Tensor | None = None


def split_advantages(adv: torch.Tensor, rollouts: list[Rollout]) -> list[torch.Tensor]:
    """One advantage per rollout: a 0-d tensor, or a [T_i] tensor for a token-level ([N, T]) estimator."""
    if adv.dim() == 1:
        return list(adv.detach())
    return [adv[i, : r.num_tokens].detach() for i, r in enumerate(rollouts)]


def batch_advantages(batch: Batch, advantage: str = "grpo", advantage_options: dict | None = None) -> list[torch.Tensor]:
    """Advantages of every rollout of `batch`, computed in its own groups by a registered estimator
    (which must need nothing beyond the batch: no tracker), one per rollout, in batch order."""
    if not batch.rollouts:
        return []
    adv = registry.get("advantage", advantage).obj(batch_input(batch), **(advantage_options or {}))
    return split_advantages(adv, batch.rollouts)


def _advantages(batch: Batch, adv: torch.Tensor | None) -> list[torch.Tensor]:
    return batch_advantages(batch) if adv is None else split_advantages(adv, batch.rollouts)


def assemble(groups: list[tuple[Prompt, list[tuple[Rollout, torch.Tensor]]]], step: int) -> RecomposedBatch:
    """Build a RecomposedBatch from (prompt, [(rollout, advantage)]) lists, dropping empty ones."""
    out, advs = [], []
    for prompt, items in groups:
        if items:
            out.append(Group(prompt, [r for r, _ in items]))
            advs += [a for _, a in items]
    if not advs:
        return RecomposedBatch(out, step, torch.zeros(0, device="cpu"))  # advantages are batch data: CPU
    if all(a.dim() == 0 for a in advs):
        return RecomposedBatch(out, step, torch.stack(advs).float())
    T = max(r.num_tokens for g in out for r in g.rollouts)
    adv = torch.zeros(len(advs), T, device="cpu")
    for i, (a, r) in enumerate(zip(advs, (r for g in out for r in g.rollouts))):
        adv[i, : r.num_tokens] = a if a.dim() == 0 else a[: r.num_tokens]
    return RecomposedBatch(out, step, adv)


# ---- Shuffle-R1 ------------------------------------------------------------------------------

@register("recompose", "shuffle-r1", provenance="CODE+INF",
          summary="Shuffle-R1: pair max/min-advantage rollouts, prune low-contrast pairs, resample by contrast")
def shuffle_r1(batch: Batch, gen: torch.Generator, adv: torch.Tensor | None = None, prune_ratio: float = 0.5,
               experience_replay: bool = True, replay_times: int = 8, sampling: str = "power", power: float = 1.0,
               temperature: float = 1.0, weight: str = "sum") -> Batch:
    """Shuffle-R1 (Zhu et al., 2025, "Shuffle-R1: Efficient RL framework for Multimodal Large Language
    Models via Data-centric Dynamic Shuffle", arXiv 2508.05612). [CODE: xiaomi-research/shuffle-r1
    shuffle_r1/custom_algos.py, ray_trainer.py; spec A2]

    1. Advantages over each whole group, before anything is pruned: the learner's estimator (`adv`;
       GRPO with unbiased std and eps 1e-6 in the code, and when adv is None); they are *not*
       recomputed afterwards. Pairing needs one scalar per rollout, so token-level estimators fail.
    2. Pairwise Trajectory Sampling: sort the group by A descending, pair (1st, last), (2nd,
       2nd-last), ...; keep the first floor(#pairs (1 - prune_ratio)) pairs in that pairing order (the
       most contrastive; the code does not re-sort by the pair score). Score of a pair:
       weight="sum" |A_a| + |A_b| (default), "max" or "mean".
    3. Advantage-based Batch Shuffle (experience_replay=True): the kept pairs of the whole batch form a
       pool; draw replay_times times min(size, #pairs) pairs without replacement, size =
       #pairs // replay_times (the code's global_bs*update_steps/(2*replay_times)); with fewer pairs
       than draws, #pairs draws of one pair each [INF], so the total never exceeds the kept set; with
       p_j ~ score_j^power (sampling="power", p = 1) or softmax(score/temperature) ("softmax"; the
       code's cosine/sine temperature schedules are not implemented); concatenate the draws, so
       high-contrast pairs repeat and low-contrast ones may drop out. Draws use the learner's seeded
       generator (spec E6).
    The group size should be even (the script uses n = 16); for odd n the middle rollout is left
    unpaired and dropped [INF]. The data stay on-policy: the learner recomputes pi_old as usual.
    """
    if sampling not in ("power", "softmax"):
        raise ValueError(f"shuffle-r1: sampling must be 'power' or 'softmax', not {sampling!r}")
    if weight not in ("sum", "max", "mean"):
        raise ValueError(f"shuffle-r1: weight must be 'sum', 'max' or 'mean', not {weight!r}")
    advs = _advantages(batch, adv)
    if any(a.dim() for a in advs):
        raise ValueError("shuffle-r1 pairs rollouts by a scalar advantage; use a sequence-level estimator")
    pairs: list[tuple[int, int, int, float]] = []  # (group index, offset a, offset b, score)
    start = 0
    for gi, g in enumerate(batch.groups):
        a = torch.stack(advs[start: start + g.n]) if g.n else torch.zeros(0, device="cpu")
        start += g.n
        order = torch.argsort(a, descending=True, stable=True).tolist()
        cand = [(order[k], order[g.n - 1 - k]) for k in range(g.n // 2)]
        for i, j in cand[: math.floor(len(cand) * (1 - prune_ratio))]:
            x, y = abs(float(a[i])), abs(float(a[j]))
            pairs.append((gi, i, j, {"sum": x + y, "max": max(x, y), "mean": (x + y) / 2}[weight]))
    if experience_replay and pairs:
        score = torch.tensor([p[3] for p in pairs], dtype=torch.float64, device="cpu")
        w = score.pow(power) if sampling == "power" else torch.softmax(score / temperature, 0)
        if not torch.isfinite(w).all() or w.sum() <= 0:
            w = torch.ones_like(score)
        size = max(1, len(pairs) // replay_times)
        draws = min(replay_times, len(pairs) // size)  # fewer pairs than draws: one pair per draw
        size = min(size, int((w > 0).sum()))  # never draw a zero-weight pair
        picks = torch.cat([torch.multinomial(w, size, replacement=False, generator=gen)
                           for _ in range(draws)]).tolist()
    else:
        picks = list(range(len(pairs)))
    offsets = [0]
    for g in batch.groups:
        offsets.append(offsets[-1] + g.n)
    out = {gi: [] for gi in range(len(batch.groups))}
    for p in picks:
        gi, i, j, _ = pairs[p]
        g = batch.groups[gi]
        out[gi] += [(g.rollouts[i], advs[offsets[gi] + i]), (g.rollouts[j], advs[offsets[gi] + j])]
    return assemble([(batch.groups[gi].prompt, items) for gi, items in out.items()], batch.step)


# ---- RoRecomp --------------------------------------------------------------------------------

class Waiting(NamedTuple):
    """A RoRecomp buffer entry: a long-correct or short-incorrect response waiting for compensation."""

    rollout: Rollout
    adv: torch.Tensor  # its advantage in its original group (0-d, or [T] for token-level estimators)
    birth: int  # the batch step it was generated for
    source: tuple[int, int]  # (RoRecomp call, group index in that batch): its original group
    prompt: Prompt


@register("recompose", "rorecomp", provenance="ABS+INF",
          summary="RoRecomp: train on short-correct + long-incorrect now, replay long-correct + short-incorrect later")
class RoRecomp:
    """RoRecomp (arXiv 2509.25958, Tencent Youtu, "RoRecomp: Enhancing Reasoning Efficiency via Rollout
    Response Recomposition in Reinforcement Learning"). [ABS: priority and compensation batches,
    brevity from recomposition without a length reward; INF: everything below, no official code, spec A1]

    Per call (one training step):
    1. Advantages inside the original groups, before recomposition (spec E4): the learner's estimator
       (`adv`; GRPO when adv is None).
    2. Classes by correctness (`Rollout.correct`) and length vs a reference: the group median length
       (length_ref="group") or the batch median ("batch"); short = length <= reference. SC, LC, SI, LI.
    3. Priority batch = SC + LI (SC carry A > 0, LI A < 0: the net gradient favours brevity); alpha < 1
       keeps only the ceil(alpha |P|) most extreme by |length - ref| / ref, the rest are dropped.
    4. Compensation batch: every `compensation_every` calls, when the buffer holds at least
       `compensation_size` entries (default: the priority batch's size, at least 1), the oldest ones
       are taken with their stored advantages.
    5. LC + SI of this step go to the FIFO replay buffer with their advantages, *after* the draw, so
       compensation rows always come from earlier steps [INF] (capacity: the oldest are dropped).
       They are off-policy: their `logprobs_T` are the stored behaviour log-probs mu, so train with
       the decoupled correction (`--correction areal-decoupled`, spec C3).
    Output groups: one per original group, this step's first, then the compensation rows' (rows of
    one original group stay together).
    Deviation [INF]: the paper trains one update on the priority batch and one on the compensation
    batch; the recompose contract returns one batch, so both are returned together and the learner's
    minibatches mix them. The buffer is part of the learner checkpoint (state_dict() holds plain
    values: Rollout.to_state and numpy advantages), so a resumed run continues exactly.
    Hyperparameters (alpha, reference, capacity, frequency) were not recovered from the paper.
    """

    def __init__(self):
        self.buffer: deque[Waiting] = deque()
        self.calls = 0

    def __call__(self, batch: Batch, gen: torch.Generator, adv: torch.Tensor | None = None, alpha: float = 1.0,
                 length_ref: str = "group", capacity: int = 4096, compensation_every: int = 1,
                 compensation_size: int | None = None) -> Batch:
        if length_ref not in ("group", "batch"):
            raise ValueError(f"rorecomp: length_ref must be 'group' or 'batch', not {length_ref!r}")
        if not 0 < alpha <= 1:
            raise ValueError("rorecomp: alpha must be in (0, 1]")
        advs = iter(_advantages(batch, adv))
        batch_ref = statistics.median([r.num_tokens for r in batch.rollouts]) if batch.rollouts else 0
        priority, pending = [], []  # priority: (extremeness, order, Waiting)
        for gi, g in enumerate(batch.groups):
            ref = statistics.median([r.num_tokens for r in g.rollouts]) if length_ref == "group" and g.n else batch_ref
            for r in g.rollouts:
                w = Waiting(r, next(advs), batch.step, (self.calls, gi), g.prompt)
                short = r.num_tokens <= ref
                if r.correct == short:  # SC or LI
                    priority.append((abs(r.num_tokens - ref) / max(ref, 1), len(priority), w))
                else:  # LC or SI
                    pending.append(w)
        if alpha < 1 and priority:
            k = math.ceil(alpha * len(priority))
            top = sorted(priority, key=lambda p: (-p[0], p[1]))[:k]
            priority = sorted(top, key=lambda p: p[1])
        self.calls += 1
        size = compensation_size or max(1, len(priority))
        comp = []
        if self.calls % compensation_every == 0 and len(self.buffer) >= size:
            comp = [self.buffer.popleft() for _ in range(size)]
        self.buffer.extend(pending)  # after the draw: compensation rows always come from earlier steps
        while len(self.buffer) > capacity:
            self.buffer.popleft()
        # grouped by original group (not by object identity), so a restored buffer groups the same way
        groups: dict[tuple[int, int], tuple[Prompt, list]] = {}
        for w in [p[2] for p in priority] + comp:
            groups.setdefault(w.source, (w.prompt, []))[1].append((w.rollout, w.adv))
        return assemble(list(groups.values()), batch.step)

    def state_dict(self) -> dict:
        return {"calls": self.calls,
                "buffer": [{"rollout": w.rollout.to_state(), "adv": w.adv.numpy().copy(), "birth": w.birth,
                            "source": w.source, "prompt": dataclasses.asdict(w.prompt)} for w in self.buffer]}

    def load_state_dict(self, s: dict) -> None:
        self.calls = s["calls"]
        self.buffer = deque(Waiting(Rollout.from_state(e["rollout"]), torch.as_tensor(e["adv"], device="cpu").clone(), e["birth"],
                                    tuple(e["source"]), Prompt(**e["prompt"])) for e in s["buffer"])
