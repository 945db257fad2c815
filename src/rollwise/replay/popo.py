"""POPO: Group Prioritized Off-Policy Optimization ("RLVR without Ineffective Samples: Group Prioritized
Off-Policy Optimization for LLM Reasoning", Mao, Qu, Wang, Zou, Ji; Tsinghua; arXiv 2606.01281). Read
from the abstract only (the method section and any code were not in the stored sources), so every
detail below the two mechanisms is [INF].

A group whose rollouts are all right or all wrong has zero GRPO advantage: it costs the update and
teaches nothing. POPO keeps the batch full of effective groups without generating more: it swaps each
ineffective on-policy group for an effective group replayed from a buffer of recent ones, and corrects
the replayed rows' off-policiness with decoupled importance sampling under one trust region.

Rule::

    buffer <- this step's effective fresh groups (reward variance > 0), with     [ABS: replay of
        their policy version (after the update: observe)                          effective groups]
    before the batch (finish): each zero-variance group of this step is         [ABS: "replaces
        replaced by one buffered group, highest priority first; the rows it        ineffective on-policy
        replaces leave the batch (discarded)                                        groups"]
    priority: newest first (smallest age = current version - the group's       [ABS: "recency-based,
        version), then the larger reward variance (quality)                       jointly considers sample
                                                                                   quality and off-policiness";
                                                                                   the exact score INF]
    a buffered group older than max_age versions is dropped; a group is         [INF]
        replayed at most once; never for a prompt already in this step's batch
        (one group per prompt); nothing to replay -> the group stays (GRPO)
    decoupled importance sampling: the learner's `areal-decoupled` correction   [ABS: "decoupled importance
        (weight pi_prox / mu with pi_prox the recomputed pi_old, the PPO clip     sampling ... consistent
        on pi_theta / pi_prox) with `ppo-clip`: a learner setting, not the         trust-region
        planner's (set `correction: areal-decoupled`, `loss: ppo-clip`)           constraints"]

Replayed rows are copies of the stored rollouts: they keep their tokens, behaviour log-probs (mu) and
policy_version, so the driver's staleness figures show their age, a correction that reads mu sees it,
and each copy carries `meta["replay_age"]` (versions) for the learner and the logs. They were charged
when generated and are not decoded again; the driver counts them as reused tokens, which a compute
budget charges at the learner's per-token cost. The zero-variance rows they replace are settled as
discarded. The version is read from this step's fresh rows (the newest policy_version among them).

Each copy also carries `meta["replay_correction"]`, the learner's correction by name (StepContext.correction;
"unknown" in a host that does not say); setting one is the user's (docs/methods_beyond.md). The buffer,
the copies and what may be stored are shared with experience replay (replay/buffer.py).

Defaults [INF]: capacity = 256 groups (oldest evicted first), max_age = 4 policy versions.
Composes with selectors (greso+popo: GRESO's refill drops zero-variance groups first, POPO replaces any
left), with AR3PO (ar3po+popo: AR3PO's reuse first, then POPO on the groups still ineffective; AR3PO's
accept then drops none of them) and with DAPO (POPO's swaps happen before DAPO's filter).
"""
from __future__ import annotations

import numpy as np

from ..control.base import Component, StepContext
from ..core.registry import register
from ..core.types import Batch, Group
from .buffer import effective_entry, entries_from_state, entries_state, fresh_version, replayed_group


@register("planner", "popo", provenance="ABS+INF",
          summary="POPO: swap zero-variance groups for recent effective groups from a replay buffer (rows carry their age)")
class POPO(Component):
    def __init__(self, capacity: int = 256, max_age: int = 4):
        if capacity < 1 or max_age < 1:
            raise ValueError(f"popo: need capacity >= 1 and max_age >= 1, not capacity={capacity}, max_age={max_age}")
        self.capacity, self.max_age = int(capacity), int(max_age)
        # buffered effective groups, oldest first: {"pid", "version", "var", "rollouts", "uses"} (buffer.py)
        self.buffer: list[dict] = []
        self._replayed: set[int] = set()  # id() of this step's replayed copies (never stored again)

    def begin_step(self, ctx: StepContext) -> None:
        self._replayed = set()

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        version = fresh_version(groups)
        if version is None or not any(g.zero_variance for g in groups):
            return groups
        self.buffer = [e for e in self.buffer if version - e["version"] <= self.max_age]
        busy = {g.prompt.id for g in groups}
        order = sorted(range(len(self.buffer)), key=lambda i: (-self.buffer[i]["version"], -self.buffer[i]["var"], i))
        queue = [i for i in order if self.buffer[i]["pid"] not in busy]
        out, used = [], set()
        for g in groups:
            if not g.zero_variance or not queue:
                out.append(g)
                continue
            i = queue.pop(0)
            replayed = replayed_group(self.buffer[i], ctx.pool, version, ctx.correction)
            self._replayed.update(id(r) for r in replayed.rollouts)
            out.append(replayed)
            used.add(i)
        self.buffer = [e for i, e in enumerate(self.buffer) if i not in used]  # each group replays once
        m = ctx.metrics
        m["popo/replayed"] = float(len(used))
        if used:
            m["popo/replay_age_mean"] = float(np.mean([g.meta["replay_age"] for g in out if "replay_age" in g.meta]))
        return out

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        for g in groups:  # this step's fresh groups (ctx.groups), never a replayed copy
            e = effective_entry(g, self._replayed)
            if e is None:
                continue
            self.buffer = [b for b in self.buffer if b["pid"] != g.prompt.id]  # the newest group of a prompt
            self.buffer.append(e)
        del self.buffer[: max(0, len(self.buffer) - self.capacity)]
        ctx.metrics["popo/buffer"] = float(len(self.buffer))

    def state_dict(self) -> dict:
        return {"buffer": entries_state(self.buffer)}

    def load_state_dict(self, s: dict) -> None:
        self.buffer = entries_from_state(s["buffer"])
