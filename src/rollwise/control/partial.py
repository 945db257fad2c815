"""Partial rollouts as the Planner runs them: what the `Partial` capability (capabilities.py) means.

A component that declares `Partial(overprovision, segment_tokens)` (control/april.py) says only that rows
which do not finish in their step are carried to the next. The Planner then holds one `PartialRollouts`
(built from every Partial declaration: the largest over-provision, the smallest segment budget) and asks it
for each step's first wave, for the per-step segment budget on every train request, and for what to carry.
Nothing here names a component; a second partial method declares the same capability and shares this code.

The rule [CODE: slime/rollout/sglang_example.py, slime/ray/buffer.py; CoPRIS agent_loop.py]: the carried
groups go first, then over-provisioned fresh prompts; once `batch_size` groups are complete and accepted the
rest are aborted, and every group with an unfinished row goes back to the store. A carried row whose oldest
token is older than the run's StalenessPolicy allows (core/staleness.py) is dropped with its group and its
prompt asked for again from scratch.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..core.types import Group, Request, Rollout


class CarryStore:
    """Groups with unfinished rows, oldest first (APRIL's data buffer)."""

    def __init__(self):
        self.groups: list[Group] = []

    def __len__(self) -> int:
        return len(self.groups)

    def resume(self, version: int, staleness):
        """Requests that continue every carried group -> (requests, owners, ready, dropped). `staleness`
        is the run's StalenessPolicy and `version` the policy version that will train them. owners[i] is
        the carried group request i continues, or None for a prompt that starts over because its rows
        grew too old (those groups are returned as dropped: their tokens are charged as aborted); ready
        are complete groups held over from the last step (APRIL keeps completed, unconsumed groups)."""
        requests, owners, ready, dropped = [], [], [], []
        for g in self.groups:
            rows = [r for r in g.rollouts if r.status != "done"]
            if staleness.bounded and not all(staleness.fresh_enough(r.oldest_version, version)
                                             for r in g.rollouts if r.num_tokens):
                dropped.append(g)
                requests.append(Request(g.prompt, g.n))
                owners.append(None)
                continue
            if not rows:
                ready.append(g)
            for r in rows:
                requests.append(Request(g.prompt, 1, prefix=r if r.num_tokens else None))
                owners.append(g)
        self.groups = []
        return requests, owners, ready, dropped

    def absorb(self, requests, owners, groups) -> list[Group]:
        """Put the groups of a wave back together: a carried group's done rows plus its rows' new
        results. Returns the groups in request order of their first request (complete or not)."""
        out, rebuilt = [], {}
        for req, owner, g in zip(requests, owners, groups):
            if owner is None:
                out.append(g)
                continue
            key = id(owner)
            if key not in rebuilt:
                rebuilt[key] = Group(owner.prompt, [r for r in owner.rollouts if r.status == "done"])
                out.append(rebuilt[key])
            rebuilt[key].rollouts.extend(g.rollouts)
        return out

    def state_dict(self) -> list:
        return [{"prompt": {"id": g.prompt.id, "text": g.prompt.text, "answer": g.prompt.answer,
                            "level": g.prompt.level}, "rollouts": [r.to_state() for r in g.rollouts]}
                for g in self.groups]

    def load_state_dict(self, s: list) -> None:
        from ..core.types import Prompt

        self.groups = [Group(Prompt(**e["prompt"]), [Rollout.from_state(r) for r in e["rollouts"]]) for e in s]
        for g in self.groups:  # restored rows keep what the checkpoint knew: carried
            for r in g.rollouts:
                r.fate = "carried"


def unfinished(g: Group) -> bool:
    return any(r.status != "done" for r in g.rollouts)


def apply_segment(requests: list[Request], segment_tokens: int | None) -> list[Request]:
    if segment_tokens:
        for r in requests:
            if r.sampling.segment_tokens is None:
                r.sampling = replace(r.sampling, segment_tokens=int(segment_tokens))
    return requests


def overprovisioned(need: int, overprovision: float) -> int:
    return need if overprovision <= 0 else int(math.ceil(need * (1.0 + overprovision)))


class PartialRollouts(CarryStore):
    """The Planner's side of the Partial capability: the carried groups (a CarryStore), the over-provision and
    segment budget of the declarations, and the groups dropped as too stale this step. `caps`: the Partial
    declarations of the planner's components."""

    def __init__(self, caps: list):
        super().__init__()
        self.overprovision = max((p.overprovision for p in caps), default=0.0)
        self.segment_tokens = min((p.segment_tokens for p in caps if p.segment_tokens), default=None)
        self.dropped: list[Group] = []  # carried groups found too stale this step (charged as aborted)
        self.busy: set[int] = set()  # prompt ids being resumed while the fresh prompts are drawn

    def held(self) -> set[int]:
        """Prompt ids not to draw again now: being resumed, or carried."""
        return self.busy | {g.prompt.id for g in self.groups}

    def segment(self, requests: list[Request]) -> list[Request]:
        return apply_segment(requests, self.segment_tokens)

    def take_dropped(self) -> list[Group]:
        dropped, self.dropped = self.dropped, []
        return dropped

    def first_wave(self, planner, ctx):
        """The first wave of a step (a generator the Planner's plan runs): carried groups first, then
        over-provisioned fresh prompts; the driver stops it once batch_size groups are complete and accepted.
        Returns the next round's requests (the planner's `more`)."""
        from .base import Wave

        resumed, owners, ready, self.dropped = self.resume(planner.version, planner.staleness)
        self.busy = {r.prompt.id for r in resumed} | {g.prompt.id for g in ready}  # not drawn again now
        carried = len(self.busy)
        fresh = yield from planner._draw(overprovisioned(max(ctx.batch_size - carried, 0), self.overprovision), ctx)
        self.busy = set()
        requests = planner._with_sampling(self.segment(resumed + fresh))
        owners = owners + [None] * len(fresh)
        members: dict = {}  # one entry per group of the wave: the indices of its requests
        for i, o in enumerate(owners):
            members.setdefault(id(o) if o is not None else ("fresh", i), []).append(i)

        def enough(finished: dict) -> bool:
            """batch_size groups are back whole (every row done) and accepted."""
            count = 0
            for idx in members.values():
                if all(i in finished for i in idx):
                    (g,) = self.absorb([requests[i] for i in idx], [owners[i] for i in idx],
                                       [finished[i] for i in idx])
                    count += not unfinished(g) and planner._accepts(g, ctx)
            return count >= ctx.batch_size

        groups = (yield Wave(requests, enough if self.overprovision > 0 else None)) if requests else []
        taken = 0
        for g in ready + self.absorb(requests, owners, groups):  # held-over groups first, as APRIL
            if unfinished(g) or (taken >= ctx.batch_size and self.overprovision > 0):
                self.groups.append(g)  # unfinished, or complete beyond the batch: next step's
                continue
            ctx.groups[g.prompt.id] = g
            taken += planner._accepts(g, ctx)
        return (yield from planner._more(list(ctx.groups.values()), ctx))
