"""What rollwise's verl integration serves beyond `PlannerHost`: its own samples and in-flight control.

verl's v1 trainer generates through an agent loop that writes every trajectory to TransferQueue. A
rollwise round becomes a verl generation round (the trainer's `refill_fn`), so a planner may ask for
samples of its own after seeing results: AR3PO/AERO/DARS stages (more samples of prompts already rolled
out, merged per prompt), pilots (pilot-commit), profiles (pvpo, sgpo, cures) and the oracle's
measurements. A Watcher that needs only each sample's tokens (DUET's abort) runs between the segments
of rollwise's segmented agent loop (integrations/verl_agent_loop.py).

The round itself runs through rollwise's own `StepDriver.generate`, against `TransferQueueEngine`
(integrations/verl.py), so charges, pruned rows and fates are the driver's code, not a copy of it.

Still refused, by name, at build time: what needs the policy in this process (hive, dots, spec-rl: the
model lives in verl's remote workers), hidden states in flight (arrol), rows resumed from their own
tokens (treepo) or carried across steps (april), and per-step or per-request sampling parameters (e3).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..control.base import Planner, StepContext, Wave, build_planner
from ..control.capabilities import Partial, Speculator, Watcher, find
from ..core.history import PromptHistory
from ..core.types import DEFAULT_SAMPLING, LightRollout, Meta, Prompt
from .host import PlannerHost, _refuse_what_hosts_cannot_set


@dataclass(slots=True, eq=False, weakref_slot=True)
class VerlRollout(LightRollout):
    """One agent-loop session as rollwise sees it: its outcome and length (LightRollout), the
    TransferQueue keys of its outputs (`{uid}_{session}_{index}`), what an in-flight watcher attached
    (`meta`: is_weight), and, once a planner component keeps it beyond its step (AR3PO's stored correct
    responses, pilot-commit's pilots), `saved`: its fields and tags copied out of TransferQueue before
    verl clears them, so that it can be trained in a later step."""

    keys: tuple = ()
    meta: dict = field(default_factory=Meta)
    saved: tuple | None = None  # (TensorDict of its outputs, [their tags])


class VerlHost(PlannerHost):
    """PlannerHost for verl's replay buffer: it serves the planner's own samples (stages, pilots,
    profiles, oracle) and token-only in-flight watchers (with `inflight`); `start`/`send` return what
    the planner yielded, a list of Requests or a Wave (requests + watch), for `StepDriver.generate`."""

    def __init__(self, spec: str | list[str], pool: Sequence[Prompt], *, batch_size: int, n: int, host: str,
                 seed: int = 0, options: dict | None = None, inflight: bool = True):
        if batch_size < 1 or n < 1:
            raise ValueError(f"{host}: batch_size and n must be >= 1 (got {batch_size}, {n})")
        self.host, self.pool, self.batch_size, self.n, self.max_n = host, pool, int(batch_size), int(n), None
        self.rng = np.random.default_rng(seed)
        self.planner: Planner = build_planner(spec, len(pool), self.rng, options)
        refuse_what_verl_cannot_serve(self.planner, host, inflight)
        self.history = PromptHistory(len(pool))
        # what PlannerHost's start/send/finish read: verl serves the planner's own samples, no policy view,
        # and hands a round's watcher to the agent loop inside the Wave that _advance returns
        self.sampling, self.inflight = True, bool(inflight)
        self.prompt_stats = self.policy = self.watch = None
        self.step_count = 0
        self._plan = None
        self._ctx: StepContext | None = None
        self._assembled = None
        self._rounds = 0
        self._capped = 0

    @property
    def ctx(self) -> StepContext | None:
        """The open step's context (None between steps)."""
        return self._ctx

    @property
    def assembled(self):
        """The step's Assembled batch once the last round is back (before `finish`)."""
        return self._assembled

    def _advance(self, groups):
        try:
            out = next(self._plan) if groups is None else self._plan.send(groups)
        except StopIteration as stop:
            self._assembled = stop.value
            return []
        self._rounds += 1
        for r in (out.requests if isinstance(out, Wave) else out):
            if r.prefix is not None:
                raise ValueError(f"{self.host}: planner {self.name!r} asked to continue a row from its tokens; "
                                 "verl's agent loop starts every session from the prompt")
            if r.sampling != DEFAULT_SAMPLING:
                raise ValueError(f"{self.host}: planner {self.name!r} set sampling parameters {r.sampling}; "
                                 "verl fixes them in actor_rollout_ref.rollout")
        return out


def refuse_what_verl_cannot_serve(planner: Planner, host: str, inflight: bool) -> None:
    """One line naming every component verl cannot serve, and why; raised when the buffer is built."""
    planner.require(host, sampling=True, policy=False, refill=True, inflight=inflight, resume=False)
    missing = []
    for c, cap in find(planner.components, Watcher):
        if cap.hidden:
            missing.append(f"{c.name} reads hidden states in flight, which verl's rollout servers do not expose")
    for c, _ in find(planner.components, Partial):
        missing.append(f"{c.name} carries unfinished rows to the next step, which verl's sync trainer does not keep")
    for c, _ in find(planner.components, Speculator):
        missing.append(f"{c.name} runs rounds its own way (drafts, trees), which verl's agent loop does not")
    if missing:
        raise ValueError(f"{host} cannot run planner {planner.name!r}: " + "; ".join(missing))
    _refuse_what_hosts_cannot_set(planner, host, per_prompt_n=True)
