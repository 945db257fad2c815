"""Experience replay for LLM RL ("Efficient RL Training for LLMs with Experience Replay", Arnal, Cabannes,
Cohen, Kempe, Munos; FAIR at Meta / NYU; arXiv 2604.08706). Read from the abstract [ABS] and a secondary
summary [SEC: jianyuh.github.io, 2026-04-16: "workers continuously push rollouts to a buffer of size N,
and trainers continuously sample from it (without removing the data)"; compute per update C (1 + W/T)
against C (1 + mu) without a buffer]; no official code was in the stored sources, so nothing is [CODE].

Strict on-policy training throws each rollout away after one update; when generation is the expensive
part, training on a mix of fresh and buffered rollouts buys updates for less generation, at the price
of staleness (older policies' rows) and less diversity. The buffer's size and the reuse rate are the
knobs of that trade.

Rule (in rollwise's synchronous step)::

    each step generates fresh groups for ceil(fresh x B) prompts (only      [SEC: the generation/consumption
        those are drawn from the epoch's pass: draws()), and fills the batch     ratio W/T < mu; as a batch
        up to B with                                                             share: INF]
        groups replayed from the buffer; while the buffer holds too few
        eligible groups, more prompts are generated fresh (fresh = 1: GRPO)
    replayed groups: drawn uniformly from the eligible buffered groups        [SEC: "sample from it (without
        (ctx.rng), without replacement within a step, never a prompt that       removing the data)"; uniform
        is already in the batch                                                 INF]
    buffer: the step's trained fresh groups with a non-zero reward variance   [INF: a zero-variance group has
        (a zero-variance group has no GRPO gradient), at most `capacity`        no gradient to reuse]
        groups, the oldest evicted first                                        [ABS: buffer size N]
    reuse: a group trains at most 1 + `max_reuse` times, then leaves           [ABS: "reusing them multiple
                                                                                times"; the cap INF]
    its own age limit: a group older than `max_age` policy versions is        [WAVE3: replay carries its own
        dropped (replay is not governed by the asynchronous staleness policy)   age limit; the value INF]
    correction: the learner's (learner.correction), recorded on each replayed [INF: the paper's correction
        row; with stale rows use one that reads mu, e.g. `tis-token` or          was not read]
        `areal-decoupled` with `ppo-clip`, and `recompute_old`

Each replayed row is a copy (replay/buffer.py, shared with POPO) carrying `meta["replay_age"]` (policy
versions) and `meta["replay_correction"]`. Accounting: a replayed row was charged when generated and is
not decoded again (the driver counts it as reused tokens); the learner's forward and backward over it are
charged like any trained row's (learner_tokens), so under a compute budget replay trades decode for
learner compute. Defaults [INF]: fresh = 0.5, capacity = 256 groups, max_reuse = 1, max_age = 4.
Metrics: `replay/fresh` (prompts generated fresh), `replay/replayed`, `replay/age_mean`, `replay/buffer`.

Composes with selectors (greso+replay), stages (ar3po+replay: AR3PO's stages on the fresh prompts only),
filters (replay+dapo: a DAPO refill round draws nothing once the quota is drawn, so it ends the step) and in-flight control (replay+duet-abort). Allocators after it
(replay+knapsack, replay+vip) keep the n = 0 of the prompts it holds back and spend the fresh prompts'
budget. Refused by name: `popo` (both fill the batch from a buffer of their own: a group could be
replayed twice in one batch) and, by speed-rl's `compose`, `speed-rl` (its chosen prompts are screened).

Drawing: `draws()` caps each draw at the quota left, so a step uses up only the prompts it generates
and an epoch of P prompts visits all P (a DAPO refill round past the quota draws nothing and ends the
step). Inside a host trainer, which draws its own candidates, the prompts past the quota get n = 0.
"""
from __future__ import annotations

import math

import numpy as np

from ..control.base import Component, StepContext
from ..control.capabilities import HoldsBack
from ..core.registry import register
from ..core.types import Batch, Group, Prompt
from .buffer import effective_entry, entries_from_state, entries_state, fresh_version, replayed_group


@register("planner", "replay", provenance="ABS+SEC+INF",
          summary="Experience replay: part of each batch from a buffer of recent trained groups (own age limit, reuse cap)")
class ExperienceReplay(Component):
    declares = (HoldsBack(),)

    def __init__(self, fresh: float = 0.5, capacity: int = 256, max_reuse: int = 1, max_age: int = 4):
        if not 0 < fresh <= 1 or capacity < 1 or max_reuse < 1 or max_age < 1:
            raise ValueError(f"replay: need 0 < fresh <= 1, capacity >= 1, max_reuse >= 1 and max_age >= 1, not "
                             f"fresh={fresh}, capacity={capacity}, max_reuse={max_reuse}, max_age={max_age}")
        self.fresh, self.capacity, self.max_reuse, self.max_age = float(fresh), int(capacity), int(max_reuse), \
            int(max_age)
        self.buffer: list[dict] = []  # buffered groups, oldest first (replay/buffer.py)
        self.version = 0  # the policy version of the next step's fresh rows (its newest seen, plus one)
        self._drawn = 0  # prompts given their n this step
        self._replayed: set[int] = set()  # id() of this step's replayed copies (never stored again)

    def compose(self, before: list, after: list) -> None:
        for o in before + after:
            if o.name == "popo":
                raise ValueError("replay does not compose with popo: both fill the batch from a buffer of their "
                                 "own, so one group could be replayed twice in a batch")

    def begin_step(self, ctx: StepContext) -> None:
        self._drawn, self._replayed = 0, set()

    def eligible(self, version: int) -> list[int]:
        """Indices of the buffered groups that may train at `version` (young enough, reuse left)."""
        return [i for i, e in enumerate(self.buffer) if version - e["version"] <= self.max_age]

    def _quota(self, ctx: StepContext) -> int:
        """Prompts generated fresh this step: the fresh share, or more while the buffer cannot fill the batch."""
        return max(math.ceil(self.fresh * ctx.batch_size), ctx.batch_size - len(self.eligible(self.version)))

    def draws(self, need: int, ctx: StepContext) -> int:
        # only the quota's prompts are drawn; the rest stay in the epoch's pass for later steps
        return max(0, min(need, self._quota(ctx) - self._drawn))

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        # after draws() every prompt here is within the quota; a host trainer that draws its own
        # candidates (TRL, verl) does not ask draws(), and there the prompts past the quota get n = 0
        want = self._quota(ctx)
        out = []
        for k in ns:  # the first `want` prompts of the step keep their n; the rest are not generated
            out.append(k if self._drawn < want else 0)
            self._drawn += self._drawn < want
        ctx.metrics["replay/fresh"] = float(min(self._drawn, want))
        return out

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        version = fresh_version(groups)
        version = self.version if version is None else version
        self.buffer = [e for e in self.buffer if version - e["version"] <= self.max_age]
        slots = ctx.batch_size - len(groups)
        busy = {g.prompt.id for g in groups}
        cand = [i for i in self.eligible(version) if self.buffer[i]["pid"] not in busy]
        # one group per prompt: of several buffered groups of a prompt, the draw may take only the first
        picked: list[int] = []
        if slots > 0 and cand:
            for i in ctx.rng.permutation(cand).tolist():
                if len(picked) == slots:
                    break
                if self.buffer[i]["pid"] not in {self.buffer[j]["pid"] for j in picked}:
                    picked.append(i)
        out = list(groups)
        for i in picked:
            e = self.buffer[i]
            g = replayed_group(e, ctx.pool, version, ctx.correction)
            self._replayed.update(id(r) for r in g.rollouts)
            out.append(g)
            e["uses"] += 1
        self.buffer = [e for e in self.buffer if e["uses"] < self.max_reuse]
        m = ctx.metrics
        m["replay/replayed"] = float(len(picked))
        if picked:
            m["replay/age_mean"] = float(np.mean([g.meta["replay_age"] for g in out[len(groups):]]))
        return out

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        versions = [r.policy_version for g in groups for r in g.rollouts if id(r) not in self._replayed]
        if versions:
            self.version = max(versions) + 1  # the learner has updated once since
        for g in groups:  # this step's fresh groups (ctx.groups), never a replayed copy
            e = effective_entry(g, self._replayed)
            if e is not None:
                self.buffer.append(e)
        del self.buffer[: max(0, len(self.buffer) - self.capacity)]
        ctx.metrics["replay/buffer"] = float(len(self.buffer))

    def state_dict(self) -> dict:
        return {"buffer": entries_state(self.buffer), "version": self.version}

    def load_state_dict(self, s: dict) -> None:
        self.buffer, self.version = entries_from_state(s["buffer"]), int(s["version"])
