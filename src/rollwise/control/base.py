"""The planner API (Control stage): which prompts get rollouts, how many, and which groups train.

A planner is a list of small *components*, each overriding only the hooks it needs. Components
compose by a spec string such as ``selector+allocator``: the Planner runs every
component's hook in order. This is the contract third parties implement; keep it small.

Hooks, in the order one step calls them::

    compose(before, after)         once, when the planner is built: the other components, in spec order;
                                   raise ValueError naming one to refuse composing with it
    bind(pool_size)                once, when the planner is built (size per-prompt arrays here)
    begin_step(ctx)                at the start of every step (reset per-step state)
    sampling(ctx)                  sampling overrides for this step's requests, e.g. {"temperature": 0.9}
    setup(ctx)                     once, before the first step (offline profiling)
    select(candidates, need, ctx)  pre-rollout: keep/skip/reorder/add prompts (selectors)
    allocate(prompts, ns, ctx)     n per prompt; returns the new ns (declared: SetsN, HoldsBack or ScalesN)
    speculate(requests, ctx)       each round's train requests, run a component's own way (drafts:
                                   drafts verified, then resumed); one Group per request
    more(groups, ctx)              after each generation round: extra Requests for prompts already
                                   rolled out this step (stages); [] when done
    finish(groups, ctx)            before the batch: repair/trim/reuse groups (reuse, rejection)
    accept(group, ctx)             may this group train? (a zero-variance filter)
    observe(groups, batch, ctx)    after the update: update the component's own state

    watch(requests, ctx)           in-flight control (a Watcher): a WaveWatch for a wave of train
                                   requests, which the driver shows every running sample's tokens after
                                   each decode step and which returns Decisions: stop, prune or reweight
                                   single samples (an abort); a watcher with `hidden = True` also
                                   gets each running sample's last-layer hidden state

**Asking for samples.** A hook that needs rollouts of its own (a pilot, a profile, an oracle
measurement) is written as a generator: ``groups = yield [Request(p, m, purpose="pilot")]``. The step
driver generates, charges and scores those requests and sends back one scored Group per Request, in
order; the hook's `return` value is its result. Components never call an engine or write the ledger,
so the same hook runs synchronously, asynchronously, or in a host trainer that can serve it.

**What a component is** it declares (control/capabilities.py): `declares = (Staged(),)` for a `more`
hook, `Partial(...)`, `Speculator(draft_cost)`, `Watcher(hidden)`, `Resumable()`, `Branching()`. The
Planner composes from those declarations alone and refuses what conflicts (one table, CONFLICTS).

**What a host must provide.** A component declares `needs_sampling` (it yields requests, or asks for
more samples after seeing results: stages) and `needs_policy` (a forward pass or model internals:
`ctx.prompt_stats`, `ctx.policy`); a Watcher needs the engine's optional peek/stop and a Resumable a
token-level engine; `refill = True` means it draws fresh prompts while fewer than `batch_size` groups
are accepted, for at most `max_rounds` rounds (dynamic sampling). A host (TRL, verl) calls
`Planner.require(...)` with what it can serve and refuses the rest by name.
"""
from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core.history import PromptHistory
from ..core.ledger import Ledger
from ..core.types import Batch, Group, Prompt, Request
from ..core.staleness import StalenessPolicy
from .capabilities import (Capability, HoldsBack, Partial, Resumable, ScalesN, SetsN, Speculator, Staged, Watcher,
                           WaveWatch, check, find)
from .partial import PartialRollouts


@dataclass
class StepContext:
    """What a component may read (and use) during one step. `history`, `ledger` (read-only for
    components: the driver alone writes it) and `policy` may be None in a host that has none."""

    step: int
    batch_size: int  # B: groups the learner wants per step
    n: int  # default group size
    pool: Sequence[Prompt]  # the train pool; Prompt.id indexes it and the history
    history: PromptHistory | None
    ledger: Ledger | None
    rng: np.random.Generator  # the planner's own stream (saved in checkpoints)
    policy: Any = None  # the policy, for components that read its internals (gradients, its vocabulary)
    task: Any = None  # the task, for what it declares (e.g. its `answer_marker`); None in hosts and tests
    # prompt_stats(texts) -> (entropy_K, embed_KD): one prefill-only pass of the current policy (components
    # that declare PromptStats); the driver charges its prompt tokens.
    prompt_stats: Callable | None = None
    # score_drafts(prompt_ids, drafts_T, temperatures) -> (logp_T list, entropy_T list, policy version):
    # one prefill of the current policy over prompt + draft per row (a speculator's verification); the driver
    # charges its prompt tokens and every draft token it scores.
    score_drafts: Callable | None = None
    # the learner's off-policy correction by name (learner.correction), for components that replay rows and
    # record on each what it is trained with; None where the host does not say
    correction: str | None = None
    groups: dict[int, Group] = field(default_factory=dict)  # this step's train groups so far, by prompt id
    metrics: dict[str, float] = field(default_factory=dict)  # components may add step metrics here


class Component:
    """Base class: every hook is a no-op. Override what your method needs. `name` and `provenance` are
    set by `@register`."""

    name = "component"
    provenance = "INF"
    rollwise_kind = "planner"  # the registry marker: a subclass may be named by import path (core/registry.py)
    refill = False  # draw fresh prompts until batch_size groups are accepted
    max_rounds = 1
    oversample = 1  # candidates drawn per needed prompt (ranking selectors want more to choose from)
    needs_sampling = False  # yields requests of its own or asks for more samples (a host must serve them)
    needs_policy = False  # reads the policy (ctx.policy / ctx.prompt_stats)
    declares: tuple[Capability, ...] = ()  # what it is (control/capabilities.py); the Planner reads only these

    @property
    def needs_inflight(self) -> bool:
        return bool(find([self], Watcher))

    @property
    def needs_resume(self) -> bool:
        return bool(find([self], Resumable))

    def compose(self, before: list["Component"], after: list["Component"]) -> None:
        """Refuse (ValueError naming the other component and why) a composition this component cannot
        follow that the declared capabilities do not cover; `before`/`after`: the others in spec order."""

    def bind(self, pool_size: int) -> None:
        pass

    def begin_step(self, ctx: StepContext) -> None:
        pass

    def sampling(self, ctx: StepContext) -> dict:
        return {}

    def setup(self, ctx: StepContext):
        pass

    def draws(self, need: int, ctx: StepContext) -> int:
        """How many prompts a draw of this step may use up from the epoch's pass (at most `need`, asked in
        spec order before each draw, refill rounds included). A component that generates fewer fresh
        prompts than the batch (a replay quota) returns what it will generate, so the prompts it
        would hold back stay in the pass for later steps instead of being drawn and given n = 0."""
        return need

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        return candidates

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        return ns

    def speculate(self, requests: list[Request], ctx: StepContext):
        """A generator: run one round of train requests; yield what to generate, return one Group per
        request. Only a component that overrides it is asked (at most one per planner)."""
        return (yield requests)

    def more(self, groups: list[Group], ctx: StepContext) -> list[Request]:
        return []

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        return groups

    def accept(self, group: Group, ctx: StepContext) -> bool:
        return True

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        pass

    def watch(self, requests: list[Request], ctx: StepContext) -> "WaveWatch | None":
        """A Watcher's in-flight rule for one wave of train requests (None: nothing to watch in it)."""
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


def sets_n(c: Component) -> bool:
    """Does component `c` set each prompt's number of rollouts by a rule of its own? It declares SetsN, or
    overrides `allocate` without declaring HoldsBack or ScalesN (capabilities.py)."""
    if find([c], SetsN):
        return True
    return type(c).allocate is not Component.allocate and not find([c], HoldsBack) and not find([c], ScalesN)


def refuse_allocators(me: Component, before: list[Component], after: list[Component]) -> None:
    """For a `compose` hook of a component that sets each prompt's n: refuse, one line naming both, another
    component that sets it too (one would overwrite the other, or its stages spend beyond the budget), and a
    ScalesN component before it (it scales the n it is given and prunes back to it: it must see the final n)."""
    for o in before + after:
        if not sets_n(o):
            continue
        if find([o], Staged):
            why = (f"{o.name} is a staged sampler that sizes each prompt's group itself (its `more` adds "
                   f"rollouts by the group's pass rate, beyond the n {me.name} allocates)")
        else:
            why = "both set each prompt's number of rollouts (allocate), so one would overwrite the other"
        raise ValueError(f"{me.name} does not compose with {o.name}: {why}")
    for o in before:
        if find([o], ScalesN):
            raise ValueError(f"{me.name} does not compose with {o.name} before it: {o.name} scales the n it is "
                             f"given and prunes back to it, so it must come after {me.name} ({me.name}+{o.name})")


class PoolSampler:
    """Epoch-wise shuffled pass over a finite pool (prompts come back every epoch, as in the papers).
    O(1) amortised per prompt drawn; the permutation is redrawn at each epoch boundary."""

    def __init__(self, num_prompts: int, rng: np.random.Generator):
        self.num_prompts, self.rng = num_prompts, rng
        self.epoch, self.pos = 0, 0
        self.perm = rng.permutation(num_prompts)

    def next(self, k: int) -> np.ndarray:
        out = []
        while k > 0:
            if self.pos >= self.num_prompts:
                self.epoch, self.pos = self.epoch + 1, 0
                self.perm = self.rng.permutation(self.num_prompts)
            take = min(k, self.num_prompts - self.pos)
            out.append(self.perm[self.pos: self.pos + take])
            self.pos, k = self.pos + take, k - take
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos, "perm": self.perm.copy()}

    def load_state_dict(self, s: dict) -> None:
        self.epoch, self.pos, self.perm = int(s["epoch"]), int(s["pos"]), np.asarray(s["perm"])


@dataclass
class Assembled:
    """The end of a step's Control: the batch to train, the groups that may not train, the groups
    after `finish` (what the batch was chosen from), and, with partial rollouts, the groups carried to
    the next step and those dropped as too stale."""

    batch: Batch
    rejected: list[Group]
    final: list[Group]
    carried: list[Group] = field(default_factory=list)
    dropped: list[Group] = field(default_factory=list)


@dataclass(frozen=True)
class Decision:
    """What a wave's watcher decides for one running sample (sample `sample` of request `index` of the
    wave): `action` "stop" ends it as done (its answer is in), "pruned" ends it as dropped (the driver
    charges its tokens to fate "pruned" and takes it out of its group), "keep" lets it run. A `weight`
    (not None) is an importance weight the rollout carries to the learner (Rollout.meta["is_weight"]);
    `meta` (not None) are entries the rollout carries in Rollout.meta (what a watcher read)."""

    index: int
    sample: int
    action: str
    weight: float | None = None
    meta: dict | None = None


@dataclass
class Wave:
    """Requests the driver runs together. `enough(finished)`, given {request index: scored Group} of
    the requests finished so far, says when the rest may be aborted (their partial rows come back).
    `watch(running)`, given {request index: [each sample's tokens so far, or None once it stopped]}
    after every decode step, returns Decisions for single samples (in-flight control); with `hidden`
    each running sample is a pair (tokens_T, h_D), its last-layer hidden state at its last token.
    `options`: keywords for the engine's submit that an engine capability takes (generate/capabilities.py:
    {"drafter": f} for Drafts); the driver refuses, by name, an engine that does not declare one, and has
    the capability charge what the engine reports for it. An engine-side method (drafts, shared prefill,
    tail batching) is then its capability, its engine and its component: nothing here changes."""

    requests: list[Request]
    enough: Callable[[dict], bool] | None = None
    watch: Callable[[dict], list[Decision]] | None = None
    hidden: bool = False
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def drafter(self):
        raise AttributeError("Wave.drafter was removed: pass Wave(requests, options={'drafter': f}) "
                             "(rollwise.generate.capabilities.Drafts)")


class Watchers(WaveWatch):
    """Several in-flight components over one wave (two Watchers in one spec), each seeing what it would see
    alone. In spec order, each watcher is shown the samples still running; once one ends a sample (stop
    or prune), later watchers see it as ended, and every other watcher is told (`ended_elsewhere`), so
    that one watcher does not count a sample another pruned as one that finished. A watcher whose capability does
    not ask for hidden states gets each sample's tokens only. "keep" decisions (weights, meta) of all of
    them reach the sample. `watches`: [(watch, hidden)], in spec order."""

    def __init__(self, watches: list[tuple]):
        self.watches = watches
        self.hidden = any(h for _, h in watches)

    def __call__(self, running: dict) -> list[Decision]:
        out: list[Decision] = []
        ended: set[tuple[int, int]] = set()
        for w, hidden in self.watches:
            strip = self.hidden and not hidden
            view = {i: [None if s is None or (i, j) in ended else (s[0] if strip else s) for j, s in enumerate(samples)]
                    for i, samples in running.items()}
            for d in w(view):
                if (d.index, d.sample) in ended:
                    continue
                out.append(d)
                if d.action != "keep":
                    ended.add((d.index, d.sample))
                    for other, _ in self.watches:
                        if other is not w and isinstance(other, WaveWatch):
                            other.ended_elsewhere(d.index, d.sample, d.action)
        return out


class Planner:
    """Runs a list of components through one step. See the module docstring for the hook order."""

    def __init__(self, components: list[Component], pool_size: int, rng: np.random.Generator,
                 staleness: StalenessPolicy | None = None):
        self.components = components
        self.rng = rng
        self.sampler = PoolSampler(pool_size, rng)
        self.round = 0
        self._set_up = False
        self._sampling: dict = {}
        self.version = 0  # the policy version of this step (the driver sets it): partial rows' staleness
        # the run's bound (core/staleness.py): carried rows it finds stale are dropped when resumed
        self.staleness = staleness if staleness is not None else StalenessPolicy()
        check(components, self.name, Component)  # what conflicts, from the declarations alone
        for i, c in enumerate(components):  # and what a component refuses by its own rule
            c.compose(components[:i], components[i + 1:])
        self.inflight = find(components, Watcher)  # [(component, its Watcher capability)]
        speculators = find(components, Speculator)
        self.speculator = speculators[0][0] if speculators else None
        partial = [cap for _, cap in find(components, Partial)]
        # partial rollouts (control/partial.py): the carried groups, each step's first wave, segment budgets
        self.carry = PartialRollouts(partial) if partial else None
        for c in components:
            c.bind(pool_size)
        # the components with an accept rule of their own (the base's accepts every group): asked per group
        self._acceptors = [c for c in components if type(c).accept is not Component.accept]

    @property
    def name(self) -> str:
        return "+".join(c.name for c in self.components)

    @property
    def partial(self) -> bool:
        """Does the planner carry unfinished rows to the next step (a component declares Partial)?"""
        return self.carry is not None

    @property
    def needs_sampling(self) -> bool:
        return any(c.needs_sampling for c in self.components)

    @property
    def needs_policy(self) -> bool:
        return any(c.needs_policy for c in self.components)

    @property
    def refill(self) -> bool:
        return any(c.refill for c in self.components)

    @property
    def needs_inflight(self) -> bool:
        return bool(self.inflight)

    @property
    def draft_cost(self) -> float | None:
        """The prefill/decode cost ratio a drafting component (its Speculator declaration) charges its draft tokens at."""
        return next((cap.draft_cost for _, cap in find(self.components, Speculator) if cap.draft_cost is not None),
                    None)

    def require(self, host: str, sampling: bool = False, policy: bool = False, refill: bool = False,
                inflight: bool = False, resume: bool = False) -> None:
        """Refuse, with the reason, components that need what `host` cannot serve."""
        missing = []
        for c in self.components:
            if c.needs_inflight and not inflight:
                missing.append(f"{c.name} needs in-flight control of the engine (each sample's tokens as they "
                               "grow, and stopping single samples)")
            if c.needs_sampling and not sampling:
                missing.append(f"{c.name} needs on-demand sampling (extra rollouts after seeing results)")
            if c.needs_policy and not policy:
                missing.append(f"{c.name} needs the policy itself (a forward pass or model internals)")
            if c.refill and not refill:
                missing.append(f"{c.name} needs refills (fresh prompts until the batch is full)")
            if c.needs_resume and not resume:
                missing.append(f"{c.name} needs an engine that continues rows from their tokens (Request.prefix)")
        if missing:
            raise ValueError(f"{host} cannot run planner {self.name!r}: " + "; ".join(missing))

    # ---- the step, as a coroutine the driver runs ---------------------------------------------
    def plan(self, ctx: StepContext):
        """Control for one step. Yields lists of Requests; the driver sends back one scored Group per
        Request, in order. Returns an Assembled batch."""
        self.begin_step(ctx)
        if not self._set_up:
            for c in self.components:
                yield from self._run(c.setup(ctx))
            self._set_up = True
        self.round = 1
        self._verdicts: dict[int, bool] = {}  # prompt id -> accepted, for the refill count (_more)
        if self.carry is not None:
            requests = yield from self.carry.first_wave(self, ctx)
        else:
            requests = yield from self._draw(ctx.batch_size, ctx)
        while requests:
            groups = yield from self._round(requests, ctx)
            grown = []
            for g in groups:
                if self.carry is not None and _unfinished(g):  # a refill's unfinished group waits for the next step
                    self.carry.groups.append(g)
                    continue
                have = ctx.groups.get(g.prompt.id)
                if have is None:
                    ctx.groups[g.prompt.id] = have = g
                else:  # a later stage for the same prompt
                    have.extend(g)
                grown.append(have)
            requests = yield from self._more(grown, ctx)
        return (yield from self._assemble(ctx))

    def _watched(self, requests: list[Request], ctx: StepContext):
        """Train requests as a Wave with the in-flight components' watcher, if there is one (several are
        joined into one, in spec order: Watchers)."""
        watches = [(w, cap.hidden) for c, cap in self.inflight for w in [c.watch(requests, ctx)] if w is not None] \
            if requests else []
        if not watches:
            return requests
        if len(watches) == 1:
            (watch, hidden), = watches
            return Wave(requests, watch=watch, hidden=hidden)
        joined = Watchers(watches)
        return Wave(requests, watch=joined, hidden=joined.hidden)

    def _round(self, requests: list[Request], ctx: StepContext):
        """Generate one round of train requests: one scored Group per request, in order."""
        requests = self._with_sampling(self._segment(requests))
        if self.speculator is None:
            return (yield self._watched(requests, ctx))
        return (yield from self._run(self.speculator.speculate(requests, ctx)))

    def _segment(self, requests: list[Request]) -> list[Request]:
        return requests if self.carry is None else self.carry.segment(requests)

    def _run(self, hook_result):
        """run_hook, with the step's sampling overrides applied to a hook's own requests."""
        if not inspect.isgenerator(hook_result):
            return hook_result
        try:
            requests = next(hook_result)
            while True:
                requests = hook_result.send((yield self._with_sampling(requests)))
        except StopIteration as stop:
            return stop.value

    def _with_sampling(self, requests):
        """The step's sampling overrides on these requests (a list, or a Wave's)."""
        if isinstance(requests, Wave):
            self._with_sampling(requests.requests)
            return requests
        if self._sampling:
            from dataclasses import replace

            for r in requests:
                fill = {k: v for k, v in self._sampling.items() if getattr(r.sampling, k) is None}
                if fill:
                    r.sampling = replace(r.sampling, **fill)
        return requests

    def _more(self, groups: list[Group], ctx: StepContext):
        refill = self.refill
        if refill:  # the verdicts count the accepted groups for a refill (below); nothing else reads them
            for g in groups:  # new or grown this round: asked again at the next count, the others' verdicts stand
                self._verdicts.pop(g.prompt.id, None)
        requests = []
        for c in self.components:
            requests += yield from self._run(c.more(groups, ctx))
        if requests:
            return requests
        if refill:
            for pid, g in ctx.groups.items():
                if pid not in self._verdicts:
                    self._verdicts[pid] = self._accepts(g, ctx)
            accepted = sum(self._verdicts.values())
            max_rounds = max(c.max_rounds for c in self.components if c.refill)
            if accepted < ctx.batch_size and self.round < max_rounds:
                self.round += 1
                return (yield from self._draw(ctx.batch_size - accepted, ctx))
        return []

    def _assemble(self, ctx: StepContext):
        """Final groups -> Assembled. Refill planners train on at most B groups (keeping the first
        B; the surplus is discarded, not carried over)."""
        groups = list(ctx.groups.values())
        for c in self.components:
            groups = yield from self._run(c.finish(groups, ctx))
        kept = [g for g in groups if self._accepts(g, ctx)] if self._acceptors else list(groups)
        if self.refill:
            kept = kept[: ctx.batch_size]
        if len(kept) == len(groups):  # kept is a subsequence of groups: all kept, none rejected (the usual case)
            rejected = []
        else:
            kept_ids = {id(g) for g in kept}
            rejected = [g for g in groups if id(g) not in kept_ids]
        if self.carry is None:
            return Assembled(Batch(kept, ctx.step), rejected, groups)
        return Assembled(Batch(kept, ctx.step), rejected, groups, self.carry.carried_now(), self.carry.take_dropped())

    def observe(self, batch: Batch, ctx: StepContext) -> None:
        for c in self.components:
            c.observe(list(ctx.groups.values()), batch, ctx)

    # ---- the same decisions for a host trainer (no sampling of its own) ------------------------
    def begin_step(self, ctx: StepContext) -> None:
        """Start a step (plan() does this; a host calls it before select/allocate of each of its steps)."""
        for c in self.components:
            c.begin_step(ctx)
        self._sampling = {}
        for c in self.components:
            self._sampling.update(c.sampling(ctx))

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        """Every component's select over host-drawn candidates (at most `need` are returned)."""
        for c in self.components:
            candidates = _no_requests(c.select(candidates, need, ctx), c)
        return list(candidates)[:need]

    def allocate(self, prompts: list[Prompt], ctx: StepContext) -> list[int]:
        ns = [ctx.n] * len(prompts)
        for c in self.components:
            ns = c.allocate(prompts, ns, ctx)
        return [int(k) for k in ns]

    def accepts(self, group: Group, ctx: StepContext) -> bool:
        return self._accepts(group, ctx)

    # ---- helpers -------------------------------------------------------------------------
    def _accepts(self, g: Group, ctx: StepContext) -> bool:
        for c in self._acceptors:  # a loop, not all(...): asked ~1,000 times a step in the simulator
            if not c.accept(g, ctx):
                return False
        return True

    def _draw(self, need: int, ctx: StepContext):
        """Draw candidates from the pool and pass them through every selector until `need` prompts
        survive or a full pass over the pool has been drawn (selectors may skip everything)."""
        for c in self.components:  # a component may use up fewer prompts of the pass (a replay quota)
            need = min(need, int(c.draws(need, ctx)))
        if need <= 0:
            return []
        oversample = max(c.oversample for c in self.components)
        chosen: list[Prompt] = []
        seen = set(ctx.groups) if self.carry is None else set(ctx.groups) | self.carry.held()
        drawn = 0
        while len(chosen) < need and drawn < len(ctx.pool):
            k = min((need - len(chosen)) * oversample, len(ctx.pool) - drawn)
            ids = self.sampler.next(k)
            take = getattr(ctx.pool, "take", None)  # a lazy pool (the simulator's) makes them in bulk
            cands = take(ids) if take is not None else [ctx.pool[i] for i in ids]
            drawn += k
            for c in self.components:
                cands = yield from self._run(c.select(cands, need - len(chosen), ctx))
            for p in cands:
                if p.id not in seen and len(chosen) < need:
                    chosen.append(p)
                    seen.add(p.id)
        ns = [ctx.n] * len(chosen)
        for c in self.components:
            ns = c.allocate(chosen, ns, ctx)
        return [Request(p, int(k)) for p, k in zip(chosen, ns) if k > 0]

    # ---- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        s = {"sampler": self.sampler.state_dict(), "set_up": self._set_up,
             "components": [c.state_dict() for c in self.components]}
        if self.carry is not None:  # in-flight partials are saved with their tokens
            s["carry"] = self.carry.state_dict()
        return s

    def load_state_dict(self, s: dict) -> None:
        self.sampler.load_state_dict(s["sampler"])
        self._set_up = bool(s["set_up"])
        if "carry" in s and self.carry is not None:
            self.carry.load_state_dict(s["carry"])
        for c, cs in zip(self.components, s["components"]):
            c.load_state_dict(cs)


def _unfinished(g: Group) -> bool:
    return any(getattr(r, "status", "done") != "done" for r in g.rollouts)


def _no_requests(result, component: Component):
    """A hook's value in a host that cannot sample: fine unless the hook actually asks for samples."""
    if not inspect.isgenerator(result):
        return result
    try:
        next(result)
    except StopIteration as stop:
        return stop.value
    result.close()
    raise ValueError(f"{component.name} asks for samples of its own; this host cannot serve them "
                     "(check Planner.require before running)")


def build_planner(spec: str | list[str], pool_size: int, rng: np.random.Generator,
                  options: dict[str, dict] | None = None, staleness: StalenessPolicy | None = None) -> Planner:
    """`"a+b"` or `["a", "b"]` (registered component names) -> Planner. `options[name]` are keyword arguments
    for that component's constructor (from the config's `planner_options`); a key that names no
    component of the spec, or an option the component does not take, is an error naming both.
    `staleness`: the run's bound on carried rows (None: unbounded)."""
    from ..core import registry

    names = [s.strip() for s in (spec.split("+") if isinstance(spec, str) else spec)]
    twice = sorted({n for n in names if names.count(n) > 1})  # two copies would act twice on one batch
    if twice:
        raise ValueError(f"planner {'+'.join(names)!r}: {', '.join(twice)} named more than once")
    options = options or {}
    for key in options:
        if key not in names:
            raise ValueError(f"planner_options: {key!r} is not a component of planner {'+'.join(names)!r} "
                             f"(its components: {', '.join(names)})")
    comps = []
    for name in names:
        entry = registry.get("planner", name)
        opts = options.get(name) or {}
        registry.check_options(entry.obj, opts, f"planner_options.{name}")
        comps.append(entry.obj(**opts))
    return Planner(comps, pool_size, rng, staleness)
