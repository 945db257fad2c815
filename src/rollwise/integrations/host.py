"""A rollwise planner run by another trainer (TRL, verl): the host generates and learns, rollwise decides.

One host step is one planner step, in rounds, exactly as in rollwise's own StepDriver:

    requests = host.start(step)         which prompts, and how many samples each (select, allocate)
    while requests:
        groups = <the host generates and scores the requests>   one Group per Request
        requests = host.send(groups)     stages, pilots, refill rounds, until the batch is assembled
    result = host.finish()              the groups that train; history recorded, planner observed

Only the coroutine `Planner.plan` decides; the host never re-implements selection, stages, refill,
reuse or filtering, so a planner behaves inside TRL or verl as it does in rollwise's loop. A host that
can generate on demand (`sampling=True`) also serves stages (more samples of a prompt already rolled
out this step, merged into its group by the planner), pilots, profiles and oracle measurements; one
that can stop single samples in flight (`inflight=True`) gets the round's watcher in `host.watch`
(an abort; when `host.watch_hidden`, the watcher also reads each running sample's last hidden
state, which a host with `hidden=True` shows it as a pair (tokens_T, h_D)), and sends
back pruned samples with status "pruned": they leave their groups here, as the StepDriver drops
them, and are counted as pruned. Components that need what a host cannot serve
(samples of their own, in-flight control, hidden states, the policy's internals, per-step sampling
parameters, per-prompt group sizes on a host with fixed groups, partial rollouts) are refused by name
when the host is built.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..control.base import Assembled, Component, Planner, StepContext, Wave, build_planner
from ..control.capabilities import Partial, Watcher, find
from ..core.history import PromptHistory
from ..core.types import DEFAULT_SAMPLING, Group, Prompt, Request


class LazyPool(Sequence):
    """The host's dataset seen as rollwise's pool: `pool[i]` is Prompt i, made on demand (a host's
    dataset may be large, or slow to index)."""

    def __init__(self, size: int, make: Callable[[int], Prompt]):
        self._size, self._make = int(size), make

    def __len__(self) -> int:
        return self._size

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._make(j) for j in range(*i.indices(self._size))]
        i = int(i)
        if not 0 <= i < self._size:
            raise IndexError(f"prompt {i} is outside the pool of {self._size}")
        return self._make(i)


@dataclass
class StepResult:
    """What one host step did: the assembled batch and its counts (tokens are generated response tokens)."""

    step: int
    assembled: Assembled
    rounds: int
    metrics: dict = field(default_factory=dict)

    @property
    def trained(self) -> list[Group]:
        return self.assembled.batch.groups

    @property
    def rejected(self) -> list[Group]:
        return self.assembled.rejected


class PlannerHost:
    """One rollwise planner inside a host trainer. `host` names the trainer in refusals.

    `prompt_stats(texts) -> (entropy_K, embed_KD)` is the host's prefill-only pass of its policy, when
    it can serve one (what a PromptStats component reads); without it, components that read the policy are refused.
    `max_n` is the most samples the host can give one prompt in one round (None: no limit);
    `per_prompt_n=False` refuses components that set group sizes (a host whose groups are fixed).
    Larger requests than `max_n` are capped, and counted in the step's metrics ("capped_requests").
    `sampling`: the host generates whatever a round asks for (stages, pilots, profiles, oracle samples);
    `inflight` / `hidden`: it runs a round's watcher between decode steps (with hidden states). `policy`
    is what components see as `ctx.policy` (a host gives at most a tokenizer view: `encode(text)`)."""

    def __init__(self, spec: str | list[str], pool: Sequence[Prompt], *, batch_size: int, n: int, host: str,
                 seed: int = 0, options: dict | None = None, max_n: int | None = None,
                 per_prompt_n: bool = True, prompt_stats: Callable | None = None, sampling: bool = False,
                 inflight: bool = False, hidden: bool = False, policy=None):
        if batch_size < 1 or n < 1:
            raise ValueError(f"{host}: batch_size and n must be >= 1 (got {batch_size}, {n})")
        if max_n is not None and n > max_n:
            raise ValueError(f"{host}: the default group size n={n} exceeds what the host can generate per "
                             f"prompt ({max_n})")
        self.host, self.pool, self.batch_size, self.n, self.max_n = host, pool, int(batch_size), int(n), max_n
        self.rng = np.random.default_rng(seed)
        self.planner: Planner = build_planner(spec, len(pool), self.rng, options)
        self.planner.require(host, sampling=sampling, policy=prompt_stats is not None, refill=True, inflight=inflight)
        _refuse_what_hosts_cannot_set(self.planner, host, per_prompt_n, hidden)
        self.sampling, self.inflight = bool(sampling), bool(inflight)
        self.history = PromptHistory(len(pool))
        self.prompt_stats, self.policy = prompt_stats, policy
        self.watch = None  # the current round's in-flight watcher (a Wave's), or None
        self.watch_hidden = False  # it reads (tokens_T, h_D) per running sample (Wave.hidden)
        self.step_count = 0  # planner steps finished
        self._plan = None
        self._ctx: StepContext | None = None
        self._assembled: Assembled | None = None
        self._rounds = 0
        self._capped = 0

    @property
    def name(self) -> str:
        return self.planner.name

    # ---- one step, in rounds --------------------------------------------------------------
    def start(self, step: int | None = None) -> list[Request]:
        """Begin a step; the first round's requests ([] when the planner chose nothing at all)."""
        if self._plan is not None:
            raise RuntimeError(f"{self.host}: a rollwise step is still open (call finish() first)")
        step = self.step_count if step is None else int(step)
        self._ctx = StepContext(step, self.batch_size, self.n, self.pool, self.history, None, self.rng,
                                policy=self.policy, prompt_stats=self.prompt_stats)
        self._plan = self.planner.plan(self._ctx)
        self._assembled, self._rounds, self._capped = None, 0, 0
        self._sent: list = []  # every rollout generated this step (all purposes), pruned ones included
        self._pruned: list = []
        return self._advance(None)

    def send(self, groups: list[Group]) -> list[Request]:
        """The scored groups of the last round, one per request and in order; the next round's
        requests, or [] when the batch is assembled."""
        if self._plan is None or self._assembled is not None:
            raise RuntimeError(f"{self.host}: no round is waiting for results")
        # counted as sent: a planner merges later stages into the groups it already holds
        self._sent += [r for g in groups for r in g.rollouts]
        for g in groups:  # as the StepDriver: samples pruned in flight leave their groups before any planner hook
            pruned = [r for r in g.rollouts if getattr(r, "status", "done") == "pruned"]
            if pruned:
                self._pruned += pruned
                g.rollouts = [r for r in g.rollouts if getattr(r, "status", "done") != "pruned"]
        return self._advance(groups)

    def finish(self) -> StepResult:
        """Close the step: record every group rolled out in PromptHistory (what history-based planners
        learn from), let the planner observe the batch, and count what happened."""
        if self._assembled is None:
            raise RuntimeError(f"{self.host}: the step's batch is not assembled yet (rounds still pending)")
        ctx, assembled = self._ctx, self._assembled
        rolled = [g for g in ctx.groups.values() if g.n > 0]
        self.history.record(rolled, ctx.step)
        self.planner.observe(assembled.batch, ctx)
        trained = assembled.batch.groups
        trained_ids = {id(g) for g in trained}
        fresh = {id(r) for r in self._sent}
        reused = [r for g in trained for r in g.rollouts if id(r) not in fresh]  # stored from earlier steps
        metrics = {
            "rounds": self._rounds,
            "prompts": len(rolled),
            "samples": sum(g.n for g in rolled),
            "tokens": sum(g.tokens for g in rolled),
            "trained_groups": len(trained),
            "trained_samples": sum(g.n for g in trained),
            "trained_tokens": sum(g.tokens for g in trained),
            "filtered_groups": sum(id(g) not in trained_ids for g in rolled),
            "zero_variance_rolled": sum(g.zero_variance for g in rolled),
            "zero_variance_trained": sum(g.zero_variance for g in trained),
            "capped_requests": self._capped,
            # everything generated this step, whatever its fate (what a ledger charges as decoded)
            "generated_samples": len(self._sent),
            "generated_tokens": sum(r.num_tokens for r in self._sent),
            "measurement_tokens": sum(r.num_tokens for r in self._sent  # pilots, profiles, oracle samples
                                      if getattr(r, "purpose", "train") != "train"),
            "pruned_samples": len(self._pruned),
            "pruned_tokens": sum(r.num_tokens for r in self._pruned),
            "reused_samples": len(reused),
            "reused_tokens": sum(r.num_tokens for r in reused),
            **{k: float(v) for k, v in ctx.metrics.items()},
        }
        result = StepResult(ctx.step, assembled, self._rounds, metrics)
        self._plan, self._ctx, self._assembled = None, None, None
        self.step_count += 1
        return result

    def _advance(self, groups):
        try:
            requests = next(self._plan) if groups is None else self._plan.send(groups)
        except StopIteration as stop:
            self._assembled = stop.value
            return []
        self._rounds += 1
        self.watch, self.watch_hidden = None, False
        if isinstance(requests, Wave):  # in-flight control of this round (require() refused it where unserved)
            if requests.enough is not None:
                raise ValueError(f"{self.host}: planner {self.name!r} stops a wave early (partial rollouts); "
                                 "this host cannot")
            self.watch, self.watch_hidden, requests = requests.watch, requests.hidden, requests.requests
        for r in requests:
            if r.prefix is not None:
                raise ValueError(f"{self.host}: planner {self.name!r} continues rows from their tokens "
                                 "(Request.prefix); this host cannot")
            if r.purpose != "train" and not self.sampling:
                raise ValueError(f"{self.host}: planner {self.name!r} asked for {r.purpose!r} samples of its own; "
                                 "this host generates train samples only")
            if r.sampling != DEFAULT_SAMPLING:
                raise ValueError(f"{self.host}: planner {self.name!r} set sampling parameters {r.sampling}; "
                                 "this host fixes them when the trainer is built")
            if self.max_n is not None and r.n > self.max_n:
                r.n = self.max_n
                self._capped += 1
        return requests

    # ---- persistence ----------------------------------------------------------------------
    def state_dict(self) -> dict:
        if self._plan is not None:
            raise RuntimeError(f"{self.host}: cannot save the planner in the middle of a step")
        return {"planner": self.planner.state_dict(), "history": self.history.state_dict(),
                "rng": self.rng.bit_generator.state, "step_count": self.step_count}

    def load_state_dict(self, state: dict) -> None:
        self.planner.load_state_dict(state["planner"])
        self.history.load_state_dict(state["history"])
        self.rng.bit_generator.state = state["rng"]
        self.step_count = int(state["step_count"])


def _refuse_what_hosts_cannot_set(planner: Planner, host: str, per_prompt_n: bool, hidden: bool = False) -> None:
    """Per-step sampling parameters, on a fixed-group host group sizes, hidden states in flight
    (Watcher(hidden=True)) and partial rollouts (Partial) are not among `Planner.require`'s needs; find them by
    what the component declares or overrides, and refuse by name."""
    probe = StepContext(0, 1, 1, [], None, None, np.random.default_rng(0))
    missing = [f"{c.name} reads hidden states in flight (Watcher(hidden=True)), which this host does not expose"
               for c, cap in find(planner.components, Watcher) if cap.hidden and not hidden]
    missing += [f"{c.name} carries unfinished rows to the next step (partial rollouts)"
                for c, _ in find(planner.components, Partial)]
    for c in planner.components:
        try:
            overrides = c.sampling(probe)
        except Exception:  # noqa: BLE001 - a component that reads state it lacks here still sets sampling
            overrides = {"?": None}
        if overrides:
            missing.append(f"{c.name} sets sampling parameters per step ({', '.join(overrides)})")
        if not per_prompt_n and type(c).allocate is not Component.allocate:
            missing.append(f"{c.name} sets per-prompt group sizes")
    if missing:
        raise ValueError(f"{host} cannot run planner {planner.name!r}: " + "; ".join(missing))
