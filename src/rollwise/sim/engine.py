"""The simulator's Generate stage: a lazy prompt pool, light rollouts and count-carrying groups.

Why not plain Rollout/Group objects: 512 prompts x 16 samples x 1000 steps is 8 million rollouts;
a torch tensor per rollout (token_ids_T) alone costs microseconds, and most planners only read each
group's n, number correct and tokens. So:

  * `SimGroup` is a `Group` whose samples live in the numpy arrays of the engine round that made them
    (one "segment" per round, several when a planner grows a group in stages). n, num_correct,
    zero_variance, tokens, mean_length, mean_entropy and rewards are computed from counts, and the
    ledger moves fates by segment (`Group.segments()`). The `rollouts` list is built only when something reads it (AR3PO, AERO, DEPO, E3,
    Pilot-Commit do), as `LightRollout`s; from then on that list is the truth and the counts are
    derived from it, so a planner that edits it (reuse, trimming) sees plain Group semantics.
  * `SimPool` is a read-only sequence of `Prompt`s made on demand (a list of 10^7 Prompt objects
    would cost gigabytes); Prompt.id indexes the population arrays and PromptHistory.
  * `SimEngine` implements the Engine protocol (generate/engine.py) and never touches the ledger: the
    step driver charges and settles SimGroups through the ledger like any Group (by their Segments).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.registry import register
from ..core.types import Group, LightRollout, Prompt, Request, Segment
from ..generate.engine import Finished
from .population import Population
from .timing import RoundTiming, TimingModel


class _Block:
    """The per-sample arrays of one engine round (shared by the groups it made)."""

    __slots__ = ("prompt_ids", "correct", "length", "entropy", "truncated", "version")

    def __init__(self, prompt_ids, correct, length, entropy, truncated, version):
        self.prompt_ids, self.correct, self.length = prompt_ids, correct, length
        self.entropy, self.truncated, self.version = entropy, truncated, version

    def rollouts(self, lo: int, hi: int, purpose: str, fate: str) -> list[LightRollout]:
        pid = self.prompt_ids[lo:hi].tolist()
        c = self.correct[lo:hi].tolist()
        ln = self.length[lo:hi].tolist()
        e = self.entropy[lo:hi].tolist()
        tr = self.truncated[lo:hi].tolist()
        v = self.version
        return [LightRollout(p, L, ok, 1.0 if ok else 0.0, h, purpose, "length" if t else "eos", v, fate)
                for p, L, ok, h, t in zip(pid, ln, c, e, tr)]


@dataclass(slots=True, eq=False)
class _Samples(Segment):
    """A Segment that knows where its samples are: rows lo:hi of an engine round's block."""

    block: _Block | None = None
    lo: int = 0
    hi: int = 0


class SimGroup(Group):
    """A Group that carries counts; its rollouts are materialised only when read."""

    _meta: dict | None = None  # class defaults: most simulated groups never set them (fewer writes per group)
    _list: list | None = None

    def __init__(self, prompt: Prompt, block: _Block, lo: int, hi: int, purpose: str,
                 num_correct: int, tokens: int, entropy_sum: float):
        self.prompt = prompt
        self._segs = [_Samples(purpose, hi - lo, tokens, "new", block, lo, hi)]
        self._n, self._c, self._tok, self._ent = hi - lo, num_correct, tokens, entropy_sum

    @property
    def meta(self) -> dict:  # made on first use: most simulated groups never carry any
        if self._meta is None:
            self._meta = {}
        return self._meta

    # ---- rollouts: built on first read ---------------------------------------------------
    @property
    def rollouts(self) -> list:
        if self._list is None:
            out = []
            for s in self._segs:
                out.extend(s.block.rollouts(s.lo, s.hi, s.purpose, s.fate))
            self._list = out
            self._segs = []
        return self._list

    @rollouts.setter
    def rollouts(self, value) -> None:
        self._list = list(value)
        self._segs = []

    @property
    def materialised(self) -> bool:
        return self._list is not None

    # ---- counts (Group's properties, without touching rollouts) -----------------------------
    @property
    def n(self) -> int:
        return self._n if self._list is None else len(self._list)

    @property
    def num_correct(self) -> int:
        return self._c if self._list is None else sum(r.correct for r in self._list)

    @property
    def rewards(self) -> list[float]:
        if self._list is None:
            return [1.0] * self._c + [0.0] * (self._n - self._c)  # order is irrelevant to readers of counts
        return [r.reward for r in self._list]

    def counts(self) -> tuple[int, int, int, float, bool]:
        if self._list is not None:
            return Group.counts(self)
        n, c = self._n, self._c
        return n, c, self._tok, self._ent / n if n else 0.0, n < 2 or c == 0 or c == n

    def statuses(self) -> set[str]:
        if self._list is None:  # the simulator's rounds are atomic: every sample it returns is done
            return {"done"} if self._n else set()
        return Group.statuses(self)

    def prefixes(self) -> list:
        return [] if self._list is None else Group.prefixes(self)  # light rollouts continue no prefix

    @property
    def zero_variance(self) -> bool:
        if self._list is None:  # rewards are 1.0 (correct) or 0.0
            return self._n < 2 or self._c == 0 or self._c == self._n
        return Group.zero_variance.fget(self)

    @property
    def tokens(self) -> int:
        return self._tok if self._list is None else sum(r.num_tokens for r in self._list)

    @property
    def mean_entropy(self) -> float:
        if self._list is None:
            return self._ent / self._n if self._n else 0.0
        return Group.mean_entropy.fget(self)

    def versions(self) -> dict[int, int]:
        if self._list is not None:
            return Group.versions(self)
        out: dict[int, int] = {}
        for s in self._segs:
            v = s.block.version
            out[v] = out.get(v, 0) + s.n
        return out

    def segments(self) -> list | None:
        return self._segs if self._list is None else None

    # ---- in-place growth ------------------------------------------------------------------
    def extend(self, other: "SimGroup") -> None:
        """Add a later stage's samples (the loop's `group.rollouts += new.rollouts`). The segments move:
        `other` is left empty, so nothing is counted twice."""
        if self._list is None and isinstance(other, SimGroup) and other._list is None:
            self._segs.extend(other._segs)
            self._n += other._n
            self._c += other._c
            self._tok += other._tok
            self._ent += other._ent
            other._segs, other._n, other._c, other._tok, other._ent = [], 0, 0, 0, 0.0
        else:
            self.rollouts.extend(other.rollouts)

    __eq__ = object.__eq__  # identity (planners compare groups by id); never materialise to compare
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"SimGroup(prompt={self.prompt.id}, n={self.n}, correct={self.num_correct}, tokens={self.tokens})"


class SimPool(Sequence):
    """The train pool as a sequence of Prompts made on demand (O(1) memory per prompt)."""

    def __init__(self, num_prompts: int):
        self.num_prompts = int(num_prompts)

    def __len__(self) -> int:
        return self.num_prompts

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [Prompt(j, "", "") for j in range(*i.indices(self.num_prompts))]
        i = int(i)
        if i < 0:
            i += self.num_prompts
        if not 0 <= i < self.num_prompts:
            raise IndexError(f"prompt {i} out of range (pool of {self.num_prompts})")
        return Prompt(i, "", "")

    def __iter__(self):
        return (Prompt(j, "", "") for j in range(self.num_prompts))

    def take(self, ids) -> list[Prompt]:
        """Prompts of the sampler's ids (in range by construction): the planner's draw, ~3x faster than
        indexing one by one, which matters at 10^5-10^6 draws per simulated second."""
        new, out = object.__new__, []
        for i in ids.tolist():
            p = new(Prompt)
            p.__dict__.update(id=i, text="", answer="", level=-1)  # what the frozen __init__ sets
            out.append(p)
        return out


@register("engine", "sim", provenance="INF",
          summary="population simulator: counts and lengths from a calibrated model, simulated timing")
class SimEngine:
    """The Engine protocol over the population model: each poll is one generation round (all queued
    requests), its samples drawn from the prompts' true success probabilities at the current policy
    version, and its system time simulated (`rounds`). Runs through `rollwise sim` and
    `rollwise bench --engine sim`; it has no tokens to train a model on."""

    def __init__(self, pop: Population, timing: TimingModel, rng: np.random.Generator):
        self.pop, self.timing, self.rng = pop, timing, rng
        self.version = 0  # the simulated policy's version (its training step)
        self.rounds: list[tuple[str, RoundTiming]] = []  # rounds since the caller last cleared it
        self.last_p: np.ndarray | None = None
        self._queue: list[Request] = []

    def submit(self, requests: list[Request]) -> None:
        if any(r.n < 0 for r in requests):
            raise ValueError("sim: a request asked for a negative number of samples")
        self._queue.extend(requests)

    @property
    def pending(self) -> int:
        return len(self._queue)

    def poll(self, max_steps: int | None = None) -> list[Finished]:
        requests, self._queue = self._queue, []
        if not requests:
            return []
        return self._round(requests)

    def abort(self, request_ids) -> list[Finished]:
        ids = set(request_ids)  # rounds are atomic: only requests not yet polled can be stopped
        out = [Finished(r, Group(r.prompt, []), 0) for r in self._queue if r.id in ids]
        self._queue = [r for r in self._queue if r.id not in ids]
        return out

    def update_weights(self, version: int, state_dict=None) -> None:
        self.version = int(version)

    def _round(self, requests: list[Request]) -> list[Finished]:
        """One generation round: every request's samples drawn at once, as arrays; then one SimGroup and
        one Finished per request, made in a single pass (per-group Python work is what the simulator's
        speed comes down to: ~10^6 groups a simulated minute)."""
        R = len(requests)
        ids = np.array([r.prompt.id for r in requests], dtype=np.int64)
        ns = np.array([r.n for r in requests], dtype=np.int64)
        pop = self.pop
        gidx, correct, length, ent, truncated, p = pop.draw(ids, ns, self.version, self.rng)
        self.last_p = p  # true success probability of each request's prompt (tests, diagnostics)
        # per-group totals; counts and token sums are whole numbers, converted to ints here in bulk
        c_g = np.bincount(gidx, weights=correct, minlength=R).astype(np.int64)
        tok_g = np.bincount(gidx, weights=length, minlength=R).astype(np.int64)
        ent_g = np.bincount(gidx, weights=ent, minlength=R)
        block = _Block(ids[gidx], correct, length, ent, truncated, self.version)
        ends = np.cumsum(ns)
        starts = ends - ns
        P = pop.prompt_len[ids]
        nz = np.maximum(ns, 1)
        t = self.timing.round(length, P[gidx].astype(np.float64), (P / nz)[gidx])
        self.rounds.append((requests[0].purpose, t))
        prompt_tokens = np.where(ns > 0, P, 0).astype(np.int64)  # one prefill per request (shared prefix)
        return [Finished(rq, SimGroup(rq.prompt, block, lo, hi, rq.purpose, c, tk, e), pt)
                for rq, lo, hi, c, tk, e, pt in zip(requests, starts.tolist(), ends.tolist(), c_g.tolist(),
                                                    tok_g.tolist(), ent_g.tolist(), prompt_tokens.tolist())]
