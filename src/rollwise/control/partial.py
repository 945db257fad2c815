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

from ..core.types import Group, Prompt, Request, Rollout


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
        return [{"prompt": _prompt_state(g.prompt), "rollouts": [r.to_state() for r in g.rollouts]}
                for g in self.groups]

    def load_state_dict(self, s: list) -> None:
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
        from .capabilities import TailBatched

        super().__init__()
        self.overprovision = max((p.overprovision for p in caps), default=0.0)
        self.segment_tokens = min((p.segment_tokens for p in caps if p.segment_tokens), default=None)
        self.dropped: list[Group] = []  # carried groups found too stale this step (charged as aborted)
        self.busy: set[int] = set()  # prompt ids being resumed while the fresh prompts are drawn
        # tail batching (TailBatched): unfinished groups restart in a long round instead of resuming
        self.restart = any(isinstance(p, TailBatched) for p in caps)
        self.queue: list[tuple[Prompt, int]] = []  # (prompt, n) waiting for a long round, oldest first
        self.aborted: list[Group] = []  # this step's unfinished groups, aborted whole

    def held(self) -> set[int]:
        """Prompt ids not to draw again now: being resumed, carried, or waiting for a long round."""
        return self.busy | {g.prompt.id for g in self.groups} | {p.id for p, _ in self.queue}

    def carried_now(self) -> list[Group]:
        """Groups whose rows leave this step untrained and unsettled: carried (open -> carried), and the tail's
        aborted ones, which go on to aborted at once (they are in `take_dropped` too)."""
        return list(self.groups) + self.aborted

    def segment(self, requests: list[Request]) -> list[Request]:
        return apply_segment(requests, self.segment_tokens)

    def take_dropped(self) -> list[Group]:
        dropped, self.dropped, self.aborted = self.dropped + self.aborted, [], []
        return dropped

    def state_dict(self):
        groups = super().state_dict()
        if not self.restart:
            return groups  # the form checkpoints have always had
        return {"groups": groups, "queue": [[_prompt_state(p), n] for p, n in self.queue]}

    def load_state_dict(self, s) -> None:
        if isinstance(s, dict):
            self.queue = [(Prompt(**p), int(n)) for p, n in s["queue"]]
            s = s["groups"]
        super().load_state_dict(s)

    def first_wave(self, planner, ctx):
        """The first wave of a step (a generator the Planner's plan runs): carried groups first, then
        over-provisioned fresh prompts; the driver stops it once batch_size groups are complete and accepted.
        Returns the next round's requests (the planner's `more`)."""
        from .base import Wave

        if self.restart:
            return (yield from self.tail_wave(planner, ctx))
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

    def tail_wave(self, planner, ctx):
        """Tail batching's first wave [PAPER: RollPacker, arXiv 2509.21009, section 4]: a long round when the
        queue holds a batch (those prompts alone, no race, to full length); otherwise a short round of
        over-provisioned fresh prompts that ends once batch_size groups are complete and accepted, every
        unfinished group aborted whole and its prompt queued. [INF] rollwise races prompts only: each keeps
        its own n rows (RollPacker also samples more responses per prompt and keeps the first that finish,
        which would bias a group towards its short responses); complete groups beyond the batch are
        discarded, not held over."""
        from .base import Wave

        B = ctx.batch_size
        long = len(self.queue) >= B
        if long:
            take, self.queue = self.queue[:B], self.queue[B:]
            requests = planner._with_sampling([Request(p, n) for p, n in take])
            groups = (yield Wave(requests)) if requests else []
            for g in groups:
                ctx.groups[g.prompt.id] = g
            deferred: list[Group] = []
        else:
            fresh = yield from planner._draw(overprovisioned(B, self.overprovision), ctx)
            requests = planner._with_sampling(fresh)

            def enough(finished: dict) -> bool:
                return sum(not unfinished(g) and planner._accepts(g, ctx) for g in finished.values()) >= B

            groups = (yield Wave(requests, enough)) if requests else []
            taken, deferred = 0, []
            for g in groups:
                if unfinished(g):
                    deferred.append(g)
                    self.queue.append((g.prompt, len(g.rollouts)))
                elif taken < B:
                    ctx.groups[g.prompt.id] = g
                    taken += planner._accepts(g, ctx)
                # else: complete beyond the batch: left out of the step's groups, so discarded
            self.aborted = deferred
        ctx.metrics.update(tail_metrics(long, deferred, list(ctx.groups.values()), len(self.queue)))
        return (yield from planner._more(list(ctx.groups.values()), ctx))


def _prompt_state(p: Prompt) -> dict:
    """A prompt as a checkpoint holds it (Prompt(**state) rebuilds it)."""
    return {"id": p.id, "text": p.text, "answer": p.answer, "level": p.level}


def tail_metrics(long: bool, deferred: list[Group], kept: list[Group], queued: int) -> dict:
    """What tail batching did this step, for its metrics row, so that its bias can be read from the run: the
    difficulty level and the tokens so far of the groups it deferred beside the level of those it kept (a
    long round's own rows then show the deferred prompts' full lengths, `len_mean` and `len_p90`)."""
    def level(groups):
        lv = [g.prompt.level for g in groups if g.prompt.level >= 0]  # -1: the task has no levels
        return float(sum(lv) / len(lv)) if lv else None
    rows = [r.num_tokens for g in deferred for r in g.rollouts]
    return {"tail_long_round": int(long), "tail_deferred": len(deferred), "tail_queue": queued,
            "tail_deferred_level": level(deferred), "tail_kept_level": level(kept),
            "tail_deferred_tokens": float(sum(rows) / len(rows)) if rows else None}
