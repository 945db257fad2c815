"""Partial rollouts: groups whose rows did not all finish in their step are carried to the next one.

APRIL ("Active Partial Rollouts in Reinforcement Learning to Tame Long-tail Generation", RLsys-Foundation,
code RLsys-Foundation/APRIL, a slime fork) and CoPRIS (Concurrency-controlled Partial Rollout with
Importance Sampling, code 777pomingzi/CoPRIS, a verl fork) both stop generation when the batch has
enough finished groups and keep what the unfinished rows generated for the next step.

Rule [CODE: slime/rollout/sglang_example.py, slime/ray/buffer.py; CoPRIS agent_loop.py]::

    submit groups until in flight >= over-provisioned count; the carried buffer goes first, then fresh
    prompts
    when `batch_size` groups are complete: abort the rest; every group with any generated row goes back
    to the buffer, its completed rows included (status carried)
    next step: each unfinished row continues from prompt + its tokens, max tokens minus what it has
    (a row with no budget left is a length stop)

rollwise's additions, both [INF]:
  * a row is also stopped at a per-step token budget (`segment_tokens`, the "partial rollout" of verl's
    agent loop: long rows then take several steps instead of stalling one);
  * the staleness bound is checked again when a row is resumed (the run's StalenessPolicy,
    run/staleness.py: async mode always, the synchronous loop when `max_staleness` is set): a row whose
    oldest token would be more than S versions old is dropped with its group (its tokens charged as
    aborted) and the prompt is asked for again from scratch.
The learner sees each token's own behaviour log-prob (the rows keep them across segments): with
`learner.recompute_old=false` the PPO ratio is taken against them, CoPRIS's cross-stage importance
sampling; with the default (recomputed old log-probs, APRIL's choice) a correction such as tis-token or
areal-decoupled reweights them.
"""
from __future__ import annotations

import math
from dataclasses import replace

from ..core.registry import register
from ..core.types import Group, Request, Rollout
from .base import Component
from .capabilities import Partial


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


@register("planner", "april", provenance="CODE+INF",
          summary="APRIL/CoPRIS partial rollouts: over-provision, stop at the batch, carry unfinished rows")
class April(Component):
    """Partial rollouts. `overprovision`: prompts asked for beyond the batch (1.0 = APRIL's 2x: 64 for a
    batch of 32), the rest aborted once `batch_size` groups are complete; `segment_tokens`: a per-step
    budget of new tokens per row (None: none). Composes with selectors and filters (`greso+april`,
    `april+dapo`); not with staged allocation, whose later stages would need rows that are still out."""

    def __init__(self, overprovision: float = 1.0, segment_tokens: int | None = None):
        if not (math.isfinite(overprovision) and overprovision >= 0):  # inf would ask for infinitely many prompts
            raise ValueError(f"april: overprovision must be a finite number >= 0, got {overprovision}")
        if segment_tokens is not None and segment_tokens < 1:
            raise ValueError(f"april: segment_tokens must be >= 1 (or None), got {segment_tokens}")
        if overprovision == 0 and segment_tokens is None:
            raise ValueError("april: set overprovision > 0 or a segment_tokens budget (else it does nothing)")
        self.overprovision, self.segment_tokens = float(overprovision), segment_tokens
        self.declares = (Partial(self.overprovision, segment_tokens),)
