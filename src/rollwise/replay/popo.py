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

What the hooks cannot do (so not done here): a component cannot see the learner's correction, so it
cannot check that replayed rows are trained with one, nor record which one on each row; the learner
settings above are the user's to set (docs/methods_beyond.md).

Defaults [INF]: capacity = 256 groups (oldest evicted first), max_age = 4 policy versions.
Composes with selectors (greso+popo: GRESO's refill drops zero-variance groups first, POPO replaces any
left), with AR3PO (ar3po+popo: AR3PO's reuse first, then POPO on the groups still ineffective; AR3PO's
accept then drops none of them) and with DAPO (POPO's swaps happen before DAPO's filter).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..control.base import Component, StepContext
from ..core.registry import register
from ..core.types import Batch, Group, Rollout


def replay_copy(r: Rollout, age: int) -> Rollout:
    """A copy of a stored rollout for the batch: same tokens, mu and version; its age in meta. A light
    row (the simulator's, a host's: outcome and length only) is copied as it is."""
    if not isinstance(r, Rollout):
        return replace(r)
    return replace(r, token_ids_T=r.token_ids_T.clone(), logprobs_T=r.logprobs_T.clone(),
                   prompt_ids=list(r.prompt_ids), meta={**r.meta, "replay_age": int(age)}, lineage=replace(r.lineage))


@register("planner", "popo", provenance="ABS+INF",
          summary="POPO: swap zero-variance groups for recent effective groups from a replay buffer (rows carry their age)")
class POPO(Component):
    def __init__(self, capacity: int = 256, max_age: int = 4):
        if capacity < 1 or max_age < 1:
            raise ValueError(f"popo: need capacity >= 1 and max_age >= 1, not capacity={capacity}, max_age={max_age}")
        self.capacity, self.max_age = int(capacity), int(max_age)
        # buffered effective groups, oldest first: {"pid", "version", "var", "rollouts"}
        self.buffer: list[dict] = []
        self._replayed: set[int] = set()  # id() of this step's replayed copies (never stored again)

    def begin_step(self, ctx: StepContext) -> None:
        self._replayed = set()

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        fresh = [r for g in groups for r in g.rollouts if r.fate == "open"]
        if not fresh or not any(g.zero_variance for g in groups):
            return groups
        version = max(r.policy_version for r in fresh)
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
            e = self.buffer[i]
            age = version - e["version"]
            copies = [replay_copy(r, age) for r in e["rollouts"]]
            self._replayed.update(id(r) for r in copies)
            out.append(Group(ctx.pool[e["pid"]], copies, {"replay_age": age}))
            used.add(i)
        self.buffer = [e for i, e in enumerate(self.buffer) if i not in used]  # each group replays once
        m = ctx.metrics
        m["popo/replayed"] = float(len(used))
        if used:
            m["popo/replay_age_mean"] = float(np.mean([g.meta["replay_age"] for g in out if "replay_age" in g.meta]))
        return out

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        for g in groups:  # this step's fresh groups (ctx.groups), never a replayed copy
            rows = [r for r in g.rollouts if id(r) not in self._replayed and r.fate == "trained"]
            if len(rows) < 2 or len({r.reward for r in rows}) < 2:
                continue
            self.buffer = [e for e in self.buffer if e["pid"] != g.prompt.id]  # the newest group of a prompt
            self.buffer.append({"pid": g.prompt.id, "version": max(r.policy_version for r in rows),
                                "var": float(np.var([r.reward for r in rows])), "rollouts": rows})
        del self.buffer[: max(0, len(self.buffer) - self.capacity)]
        ctx.metrics["popo/buffer"] = float(len(self.buffer))

    def state_dict(self) -> dict:
        return {"buffer": [{"pid": e["pid"], "version": e["version"], "var": e["var"],
                            "rollouts": [r.to_state() for r in e["rollouts"]]} for e in self.buffer]}

    def load_state_dict(self, s: dict) -> None:
        self.buffer = [{"pid": int(e["pid"]), "version": int(e["version"]), "var": float(e["var"]),
                        "rollouts": [Rollout.from_state(d) for d in e["rollouts"]]} for e in s["buffer"]]
