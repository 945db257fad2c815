"""DUET: DUal-controlled tokEn allocaTion (arXiv 2605.08441; abstract only, no code found).

DUET controls the token budget on two axes: how many rollouts each prompt gets (count allocation,
before rollout: `duet`) and how long each rollout may run (a marker-gated abort, during generation:
`duet-abort`). They compose by name: `duet+duet-abort`. Nothing here is [CODE]: DUET has no released code.

Count allocation (`duet`; [ABS] mechanism; [INF] formula, the paper's surrogate was not retrieved)::

    p_bar(x) = (c_last * w + a0) / (n_last * w + a0 + b0),  w = decay ** age   (Beta-shrunk last
               pass rate, its evidence faded by the age of the visit; unseen -> prior mean)
    u(x) = p_bar (1 - p_bar)                              (pre-rollout informativeness)
    n_x = clip(round(N_budget * u / sum u), n_min, n_max) over prompts with u >= u_zero; else 0
    N_budget = the incoming budget, sum of ns (n * |batch| unless another allocator ran first)

Prompts given 0 rollouts are skipped this step (the planner drops zero-size requests; there is no
refill), so the freed budget goes to the informative prompts of the batch.

Defaults [INF, embedded n = 8]: a0 = b0 = 1, decay = 0.99 per step (a 60-step-old visit, about
one epoch of a 2000-prompt pool at B = 32, keeps ~55% of its weight), u_zero = 0.1 (skips a prompt
whose last visit, under ~15 steps ago, was 8/8 or 0/8; older ones get a reduced share instead),
n_min = 2, n_max = 2n. Reads only PromptHistory rows of the batch: O(batch).

Marker-gated abort (`duet-abort`; the rule [SEC: the mouseion topic page "marker-gated-abort"], the
weight 1/q and everything below marked [INF])::

    while a train sample y is generated (checked after every token, so stops land exactly):
        if the answer marker has appeared (its last token at position m):
            stop y once len(y) = m + grace: it is kept, scored and trained (finish_reason "stop")
        elif len(y) > h_abort + grace and y has not passed the gate yet (one draw per sample):
            with probability 1 - q: prune y (status/finish_reason/fate "pruned")
            with probability q:     continue to its end, with importance weight w = 1/q  [INF]

  * Pruned samples are dropped from the loss and from their group ([INF], the spec's default, not
    "abort = failure"): the driver charges their tokens to fate "pruned" and the group's advantages
    use the survivors. A group left empty is dropped from the batch. PromptHistory (and so the count
    half's pass rates) records the survivors only. Step metrics: duet/stopped, duet/kept, duet/pruned.
  * The survivors' weight 1/q reaches the learner as `Rollout.meta["is_weight"]`, a detached
    multiplier of every token's loss of that row (Horvitz-Thompson: the expected gradient matches the
    no-abort estimator over samples that reach the gate). `self_normalize=true` divides the weights
    of a group by their mean (the spec's option; biased, lower variance) [INF].
  * The marker is a task property: the task's `answer_marker` (None for the embedded arithmetic task,
    whose answers are a few digits: then only the length gate applies), or the `marker` option (text,
    encoded with the policy's tokenizer, or token ids; "" = none). Matching is on token ids, so a marker
    the model writes with other token boundaries than the tokenizer's own encoding is missed [INF].
  * Draws are seeded: u = Uniform from (a base drawn once from the planner's stream and checkpointed,
    step, wave of the step, request of the wave, sample), so they do not depend on when the engine
    reports a sample, and a resumed run draws the same [INF].
  * q = 0.05 is the paper's [SEC]; h_abort = 64 and grace = 4 are [INF] (unknown in the paper: set
    h_abort for the task's response lengths; on 5-token arithmetic answers the gate never fires).
  * Needs an engine with in-flight control of single samples (peek/stop: the torch engine); refused by
    the vLLM engine, the simulator and host trainers (TRL, verl); does not compose with partial
    rollouts (a resumed row would lose its gate decision). Composes with ARRoL (`arrol+duet-abort`): the
    gate watches every row ARRoL has not pruned.
"""
from __future__ import annotations

import numpy as np

from ..core.registry import register
from ..core.task import option
from ..core.types import Group, Prompt, Request
from .base import Component, Decision, StepContext
from .capabilities import SetsN, Watcher, WaveWatch


def informativeness(last_n, last_correct, age, a0: float, b0: float, decay: float) -> np.ndarray:
    """u = p_bar (1 - p_bar) with p_bar the decayed, Beta-shrunk last pass rate (age < 0: unseen)."""
    last_n = np.asarray(last_n, np.float64)
    age = np.asarray(age, np.float64)
    w = np.where(age >= 0, decay ** np.maximum(age, 0), 0.0)
    p = (np.asarray(last_correct, np.float64) * w + a0) / (last_n * w + a0 + b0)
    return p * (1 - p)


def allocate_counts(u: np.ndarray, budget: int, n_min: int, n_max: int, u_zero: float) -> np.ndarray:
    u = np.asarray(u, np.float64)
    active = u >= u_zero
    out = np.zeros(len(u), dtype=np.int64)
    if active.any() and budget > 0:
        raw = budget * u[active] / u[active].sum()
        out[active] = np.clip(np.round(raw), n_min, n_max).astype(np.int64)
    return out


@register("planner", "duet", provenance="ABS+INF",
          summary="DUET (count half): rollouts per prompt by a pre-rollout informativeness score")
class DUET(Component):
    declares = (SetsN(),)

    def __init__(self, n_min: int = 2, n_max: int | None = None, a0: float = 1.0, b0: float = 1.0,
                 decay: float = 0.99, u_zero: float = 0.1):
        if n_min < 0 or (n_max is not None and n_max < max(n_min, 1)):
            raise ValueError("duet: need 0 <= n_min <= n_max")
        if a0 <= 0 or b0 <= 0 or not 0 < decay <= 1:
            raise ValueError("duet: need a0, b0 > 0 and 0 < decay <= 1")
        self.n_min, self.n_max = int(n_min), n_max
        self.a0, self.b0, self.decay, self.u_zero = float(a0), float(b0), float(decay), float(u_zero)

    def scores(self, ids, ctx: StepContext) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        h = ctx.history
        last = h.last_step[ids]
        age = np.where(last >= 0, ctx.step - last, -1)
        return informativeness(h.last_n[ids], h.last_correct[ids], age, self.a0, self.b0, self.decay)

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        if not prompts:
            return ns
        u = self.scores([p.id for p in prompts], ctx)
        n_max = self.n_max or 2 * ctx.n
        out = allocate_counts(u, int(sum(ns)), self.n_min, n_max, self.u_zero)
        ctx.metrics["duet/skipped"] = float((out == 0).sum())
        ctx.metrics["duet/mean_u"] = float(u.mean())
        return [int(k) for k in out]


@register("planner", "duet-abort", provenance="SEC+INF",
          summary="DUET (abort half): stop after the answer marker; past h_abort+grace without one, "
                  "prune w.p. 1-q, else keep with weight 1/q")
class DUETAbort(Component):
    declares = (Watcher(),)  # prunes single samples in flight

    def __init__(self, h_abort: int = 64, grace: int = 4, q: float = 0.05, marker: str | list | None = None,
                 self_normalize: bool = False):
        if not (_is_int(h_abort) and _is_int(grace) and h_abort >= 0 and grace >= 0):
            raise ValueError(f"duet-abort: need h_abort >= 0 and grace >= 0 (whole tokens), "
                             f"got {h_abort!r} and {grace!r}")
        if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q <= 1:
            raise ValueError(f"duet-abort: need 0 < q <= 1 (the keep probability past the gate), got {q!r}")
        if not (marker is None or isinstance(marker, str)
                or (isinstance(marker, (list, tuple)) and marker and all(_is_int(t) and t >= 0 for t in marker))):
            raise ValueError(f"duet-abort: marker must be text, a non-empty list of token ids or None, got {marker!r}")
        if not isinstance(self_normalize, bool):
            raise ValueError(f"duet-abort: self_normalize must be true or false, got {self_normalize!r}")
        self.h_abort, self.grace, self.q, self.marker = int(h_abort), int(grace), float(q), marker
        self.self_normalize = self_normalize
        self._base: int | None = None  # the draws' seed, drawn once from the planner's stream
        self._waves = 0  # watched waves this step

    def begin_step(self, ctx: StepContext) -> None:
        if self._base is None:
            self._base = int(ctx.rng.integers(2**62))
        self._waves = 0

    def marker_ids(self, ctx: StepContext) -> list[int]:
        """The marker as token ids: the option, else the task's `answer_marker`; [] = no marker."""
        m = self.marker if self.marker is not None else option(ctx.task, "answer_marker")
        if not m:
            return []
        if not isinstance(m, str):
            return [int(t) for t in m]
        if ctx.policy is None or not hasattr(ctx.policy, "encode"):
            raise ValueError("duet-abort: a text marker needs the policy's tokenizer; give it as token ids")
        return list(ctx.policy.encode(m))

    def watch(self, requests: list[Request], ctx: StepContext) -> "AbortGate":
        self._waves += 1
        return AbortGate(self, requests, self.marker_ids(ctx), (self._base, ctx.step, self._waves), ctx.metrics)

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        if self.self_normalize:
            for g in groups:
                ws = [r.meta.get("is_weight", 1.0) for r in g.rollouts]
                if any(w != 1.0 for w in ws):
                    mean = sum(ws) / len(ws)
                    for r, w in zip(g.rollouts, ws):
                        r.meta["is_weight"] = w / mean
        return [g for g in groups if g.n]  # every sample pruned: nothing to train

    def state_dict(self) -> dict:
        return {"base": self._base}

    def load_state_dict(self, state: dict) -> None:
        self._base = state.get("base")


class AbortGate(WaveWatch):
    """DUET's rule over one wave (the driver calls it after every decode step with each running
    sample's tokens). Per sample: how far the marker search got, where the marker ended, whether the
    sample has passed the length gate."""

    def __init__(self, rule: DUETAbort, requests: list[Request], marker: list[int], key: tuple, metrics: dict):
        self.rule, self.requests, self.marker, self.key, self.metrics = rule, requests, marker, key, metrics
        self.rows: dict[tuple[int, int], list] = {}  # (request index, sample) -> [scanned, marker end, gated]

    def __call__(self, running: dict) -> list[Decision]:
        out = []
        for i, samples in running.items():
            if self.requests[i].purpose != "train":
                continue
            for j, toks in enumerate(samples):
                if toks is not None:
                    d = self.decide(i, j, toks)
                    if d is not None:
                        out.append(d)
        return out

    def decide(self, i: int, j: int, toks) -> Decision | None:
        rule, k = self.rule, len(toks)
        row = self.rows.setdefault((i, j), [0, None, False])
        if row[1] is None and self.marker:
            L = len(self.marker)
            lo = max(0, row[0] - L + 1)  # a marker may straddle the last look
            at = _find(toks[lo:k].tolist(), self.marker)
            if at >= 0:
                row[1] = lo + at + L
            row[0] = k
        if row[1] is not None:  # the answer is in: keep it, stop after the grace window
            if k >= row[1] + rule.grace:
                self._count("duet/stopped")
                return Decision(i, j, "stop")
            return None
        if row[2] or k <= rule.h_abort + rule.grace:
            return None
        row[2] = True  # the gate: one draw per sample
        u = np.random.default_rng([*self.key, i, j]).random()
        if u < rule.q:
            self._count("duet/kept")
            return Decision(i, j, "keep", weight=1.0 / rule.q)
        self._count("duet/pruned")
        return Decision(i, j, "pruned")

    def _count(self, key: str) -> None:
        self.metrics[key] = self.metrics.get(key, 0.0) + 1.0


def _find(seq: list[int], sub: list[int]) -> int:
    """First index of `sub` in `seq`, or -1."""
    L = len(sub)
    for a in range(len(seq) - L + 1):
        if seq[a:a + L] == sub:
            return a
    return -1


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)
