"""The simulator's Generate stage: a lazy prompt pool, light rollouts and count-carrying groups.

Why not plain Rollout/Group objects: 512 prompts x 16 samples x 1000 steps is 8 million rollouts;
a torch tensor per rollout (token_ids_T) alone costs microseconds, and most planners only read each
group's n, number correct and tokens. So:

  * `SimGroup` is a `Group` whose samples live in the numpy arrays of the engine call that made them
    (one "segment" per call, several when a planner grows a group in stages). n, num_correct,
    zero_variance, tokens, mean_length, mean_entropy, rewards are computed from counts. The
    `rollouts` list is built only when something reads it (AR3PO, AERO, DEPO, E3, Pilot-Commit do),
    as `SimRollout`s; from then on that list is the truth and the counts are derived from it, so a
    planner that edits it (reuse, trimming) sees plain Group semantics.
  * `SimRollout` is a slotted dataclass with Rollout's field names plus `num_tokens` as a field
    (what the ledger and planners read). token_ids_T / logprobs_T are shared empty placeholders:
    the simulator has no tokens. `dataclasses.replace` and `fields`-based state dicts work on it.
  * `SimPool` is a read-only sequence of `Prompt`s made on demand (a list of 10^7 Prompt objects
    would cost gigabytes); Prompt.id indexes the population arrays and PromptHistory.
  * `SimGroup.reclassify` moves a group's train rollouts to "discarded" by counts, exactly as
    `Ledger.reclassify` would move the objects (same totals by purpose).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..core.ledger import Ledger
from ..core.types import Group, Prompt, Request
from .population import Population
from .timing import RoundTiming, TimingModel

_EMPTY_LONG = torch.empty(0, dtype=torch.long)
_EMPTY_FLOAT = torch.empty(0, dtype=torch.float32)


@dataclass(slots=True, eq=False)
class SimRollout:
    """A simulated response: what planners and the ledger read, no tokens."""

    prompt_id: int
    num_tokens: int
    correct: bool
    reward: float
    entropy: float
    purpose: str = "train"
    finish_reason: str = "eos"
    policy_version: int = 0
    prompt_ids: tuple = ()
    text: str = ""
    token_ids_T: torch.Tensor = field(default=_EMPTY_LONG)
    logprobs_T: torch.Tensor = field(default=_EMPTY_FLOAT)


class _Block:
    """The per-sample arrays of one engine call (shared by the groups it made)."""

    __slots__ = ("prompt_ids", "correct", "length", "entropy", "truncated", "version")

    def __init__(self, prompt_ids, correct, length, entropy, truncated, version):
        self.prompt_ids, self.correct, self.length = prompt_ids, correct, length
        self.entropy, self.truncated, self.version = entropy, truncated, version

    def rollouts(self, lo: int, hi: int, purpose: str) -> list[SimRollout]:
        pid = self.prompt_ids[lo:hi].tolist()
        c = self.correct[lo:hi].tolist()
        ln = self.length[lo:hi].tolist()
        e = self.entropy[lo:hi].tolist()
        tr = self.truncated[lo:hi].tolist()
        v = self.version
        return [SimRollout(p, L, ok, 1.0 if ok else 0.0, h, purpose, "length" if t else "eos", v)
                for p, L, ok, h, t in zip(pid, ln, c, e, tr)]


class SimGroup(Group):
    """A Group that carries counts; its rollouts are materialised only when read."""

    def __init__(self, prompt: Prompt, block: _Block, lo: int, hi: int, purpose: str,
                 num_correct: int, tokens: int, entropy_sum: float):
        self.prompt = prompt
        # segments: [block, lo, hi, purpose, tokens]; purpose is mutable (reclassify)
        self._segs = [[block, lo, hi, purpose, tokens]]
        self._n, self._c, self._tok, self._ent = hi - lo, num_correct, tokens, entropy_sum
        self._list: list | None = None

    # ---- rollouts: built on first read ---------------------------------------------------
    @property
    def rollouts(self) -> list:
        if self._list is None:
            out = []
            for b, lo, hi, purpose, _ in self._segs:
                out.extend(b.rollouts(lo, hi, purpose))
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

    # ---- in-place growth and ledger moves ---------------------------------------------------
    def extend(self, other: "SimGroup") -> None:
        """Add a later stage's samples (the loop's `group.rollouts += new.rollouts`)."""
        if self._list is None and isinstance(other, SimGroup) and other._list is None:
            self._segs.extend(other._segs)
            self._n += other._n
            self._c += other._c
            self._tok += other._tok
            self._ent += other._ent
        else:
            self.rollouts.extend(other.rollouts)

    def reclassify(self, ledger: Ledger, frm: str, to: str) -> None:
        """Ledger.reclassify of this group's `frm` rollouts to `to`, by counts when not materialised."""
        if self._list is not None:
            ledger.reclassify([r for r in self._list if r.purpose == frm], to)
            return
        ledger._check(to)
        for seg in self._segs:
            if seg[3] == frm:
                k = seg[2] - seg[1]
                ledger.rollouts[frm] -= k
                ledger.tokens[frm] -= seg[4]
                ledger.rollouts[to] += k
                ledger.tokens[to] += seg[4]
                seg[3] = to

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


class SimEngine:
    """generate(requests) -> SimGroups; charges the ledger by purpose and times the round."""

    def __init__(self, pop: Population, ledger: Ledger, timing: TimingModel, rng: np.random.Generator):
        self.pop, self.ledger, self.timing, self.rng = pop, ledger, timing, rng
        self.step = 0  # policy version (set by the runner)
        self.rounds: list[tuple[str, RoundTiming]] = []  # this step's rounds (purpose of the first request)
        self.last_p: np.ndarray | None = None

    def generate(self, requests: list[Request]) -> list[SimGroup]:
        R = len(requests)
        if R == 0:
            return []
        ids = np.fromiter((r.prompt.id for r in requests), dtype=np.int64, count=R)
        ns = np.fromiter((r.n for r in requests), dtype=np.int64, count=R)
        if (ns < 0).any():
            raise ValueError("sim: a request asked for a negative number of samples")
        pop = self.pop
        gidx, correct, length, ent, truncated, p = pop.draw(ids, ns, self.step, self.rng)
        self.last_p = p  # true success probability of each request's prompt (tests, diagnostics)
        c_g = np.bincount(gidx, weights=correct, minlength=R)
        tok_g = np.bincount(gidx, weights=length, minlength=R)
        ent_g = np.bincount(gidx, weights=ent, minlength=R)
        block = _Block(ids[gidx], correct, length, ent, truncated, self.step)
        ends = np.cumsum(ns)
        starts = ends - ns
        # ledger: exactly what Ledger.charge does per rollout, by purpose
        purposes = [r.purpose for r in requests]
        first = purposes[0]
        P = pop.prompt_len[ids]
        if all(x == first for x in purposes):
            Ledger._check(first)
            self.ledger.rollouts[first] += int(ns.sum())
            self.ledger.tokens[first] += int(length.sum())
        else:
            for pu, k, t in zip(purposes, ns.tolist(), tok_g.tolist()):
                Ledger._check(pu)
                self.ledger.rollouts[pu] += k
                self.ledger.tokens[pu] += int(t)
        self.ledger.prompt_tokens += int(P[ns > 0].sum())  # one prefill per request (shared prefix)
        # timing of this round
        nz = np.maximum(ns, 1)
        t = self.timing.round(length, P[gidx].astype(np.float64), (P / nz)[gidx])
        self.rounds.append((first, t))
        groups = [SimGroup(rq.prompt, block, lo, hi, pu, int(c), int(tk), e)
                  for rq, lo, hi, pu, c, tk, e in zip(requests, starts.tolist(), ends.tolist(), purposes,
                                                      c_g.tolist(), tok_g.tolist(), ent_g.tolist())]
        return groups
