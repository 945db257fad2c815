"""What a component is, declared: the small typed interface the Planner composes from.

A component lists what it is in `declares`, a tuple of the capabilities below: a class attribute, or set
per instance in `__init__` where its options decide them (APRIL's over-provision). The Planner reads
nothing else to decide how a step runs and what may be composed, and a host reads the same declarations
(`Planner.require`) to refuse what it cannot serve. A new Generate-stage method is then one file: it
declares, say, `Watcher()` and returns a `WaveWatch` from `watch()`; no framework file changes.

    Staged()                 asks for more samples of prompts already rolled out this step (`more`)
    Partial(over, segment)   rows that do not finish in their step are carried to the next (APRIL)
    TailBatched(over)        a Partial whose unfinished groups restart in a later long round (RollPacker)
    Speculator(draft_cost)   runs each round's train requests its own way (`speculate`: SPEC-RL's drafts)
    Watcher(hidden)          watches samples as they grow and stops single ones (`watch`: DUET, ARRoL);
                             `hidden` asks the engine for each running sample's last hidden state
    Resumable()              continues rows from their own tokens (`Request.prefix`: TreePO's branches)
    Branching()              a group's rollouts share prefixes (a tree: TreePO)
    SetsN()                  its `allocate` sets each prompt's number of rollouts by a rule of its own
    HoldsBack()              its `allocate` only holds prompts back (n = 0) and passes the other n on
    ScalesN()                its `allocate` scales the n it is given (and prunes back to it in flight)
    PromptStats()            reads the policy only through `ctx.prompt_stats` (one prefill-only pass)

An `allocate` overridden without one of SetsN, HoldsBack, ScalesN is taken as SetsN (the safe reading:
it is refused beside another component that sets n).

What does not compose, and why, is one table (`CONFLICTS`), read by `check`.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Capability:
    """One thing a component is."""


@dataclass(frozen=True)
class Staged(Capability):
    """Asks for more samples of prompts already rolled out this step (the `more` hook: AR3PO, AERO, DARS)."""


@dataclass(frozen=True)
class Partial(Capability):
    """Partial rollouts: `overprovision` prompts asked for beyond the batch (the rest aborted once the batch is
    complete) and a per-step budget of new tokens per row, `segment_tokens` (None: none)."""

    overprovision: float = 0.0
    segment_tokens: int | None = None


@dataclass(frozen=True)
class TailBatched(Partial):
    """Tail batching (RollPacker): prompts over-provisioned as with Partial, but a group not finished when the
    batch is complete is aborted whole (its tokens charged as aborted, none trained) and its prompt waits in a
    long queue; once the queue holds a batch, a long round runs those prompts alone, to full length. No row
    spans two steps, so training stays on-policy. `segment_tokens` does not apply."""


@dataclass(frozen=True)
class Speculator(Capability):
    """Runs each round's train requests its own way (the `speculate` hook). `draft_cost`: the cost of a
    draft token its verification scores, in decoded-token units (the ledger weighs them by it); None for
    a speculator that drafts nothing (TreePO)."""

    draft_cost: float | None = None


@dataclass(frozen=True)
class Watcher(Capability):
    """In-flight control (the `watch` hook returns a WaveWatch); `hidden`: its watch reads each running
    sample's last-layer hidden state (an engine that exposes them is needed)."""

    hidden: bool = False


@dataclass(frozen=True)
class Resumable(Capability):
    """Continues rows from their own tokens (Request.prefix): a token-level engine is needed."""


@dataclass(frozen=True)
class Branching(Capability):
    """A group's rollouts share prefixes (a tree): its shared tokens are generated once, trained in every leaf."""


@dataclass(frozen=True)
class SetsN(Capability):
    """Its `allocate` sets each prompt's number of rollouts by a rule of its own (a budget allocator, a
    staged sampler's first stage): two such components would overwrite each other's n."""


@dataclass(frozen=True)
class HoldsBack(Capability):
    """Its `allocate` only holds prompts back (n = 0: a replay quota, a deferred prompt) and passes every other
    prompt's n on unchanged, so it composes with any allocator."""


@dataclass(frozen=True)
class ScalesN(Capability):
    """Its `allocate` scales the n it is given (an over-provision it prunes back to in flight), so it must come
    after every component that sets n: it has to see the final n."""


@dataclass(frozen=True)
class PromptStats(Capability):
    """Reads the policy only through `ctx.prompt_stats` (one prefill-only pass over the prompts: entropy and
    embedding), which a host that holds the model can serve without serving the policy itself."""


class WaveWatch:
    """What a Watcher's `watch()` returns for one wave: called after every decode step with {request index:
    [each sample's tokens so far, or None once it ended]} (with `hidden`, each running sample is a pair
    (tokens_T, h_D)); returns Decisions. `ended_elsewhere(index, sample, action)` is told when another
    watcher of the same wave ended a sample (`arrol+duet-abort`)."""

    def __call__(self, running: dict) -> list:
        raise NotImplementedError

    def ended_elsewhere(self, index: int, sample: int, action: str) -> None:
        pass


# (a, b, why): a component declaring a does not compose with one declaring b (nor b with a)
CONFLICTS: list[tuple[type, type, str]] = [
    (Partial, Staged, "a later stage would need rows that are still being generated"),
    (TailBatched, Partial, "one restarts in a long round the prompts the other resumes from their rows"),
    (Partial, Watcher, "a resumed row would lose its in-flight state"),
    (Partial, Speculator, "a row it resumes would be resumed twice"),
    (Speculator, Speculator, "a row it resumes would be resumed twice"),
    (Speculator, Watcher, "the rows it runs its own way never reach the watcher whole"),
]

# hook -> the capability a component that overrides it must declare
HOOKS: dict[str, type] = {"more": Staged, "speculate": Speculator, "watch": Watcher}

# attributes earlier versions read with getattr, and what replaces each
REMOVED: dict[str, str] = {
    "partial": "declares = (Partial(overprovision, segment_tokens),)",
    "needs_inflight": "declares = (Watcher(),)",
    "needs_resume": "declares = (Resumable(),)",
    "hidden": "declares = (Watcher(hidden=True),)",
}


def declared(component) -> tuple[Capability, ...]:
    caps = tuple(getattr(component, "declares", ()) or ())
    for c in caps:
        if not isinstance(c, Capability):
            raise ValueError(f"{_name(component)}: declares must hold capabilities "
                             f"(rollwise.control.capabilities), got {c!r}")
    return caps


def find(components, kind: type) -> list[tuple[object, Capability]]:
    """(component, capability) for every declaration of `kind`, in spec order."""
    return [(c, cap) for c in components for cap in declared(c) if isinstance(cap, kind)]


def check(components, planner: str, base: type) -> None:
    """Refuse, with one line naming the components and the reason, a planner whose declarations conflict;
    a hook overridden without its declaration; an attribute that earlier versions read and this one does not."""
    for c in components:
        for attr, instead in REMOVED.items():
            if any(attr in vars(k) for k in type(c).__mro__ if k is not base and k is not object):
                raise ValueError(f"{_name(c)}: the component attribute {attr!r} was removed in 0.4; {instead} "
                                 "(rollwise.control.capabilities)")
        for hook, cap in HOOKS.items():
            if getattr(type(c), hook, None) is not getattr(base, hook) and not any(isinstance(d, cap) for d in declared(c)):
                raise ValueError(f"{_name(c)} overrides {hook}() but does not declare it: add "
                                 f"declares = ({cap.__name__}(),) (rollwise.control.capabilities)")
    for i, c in enumerate(components):
        for d in components[i:]:
            for a, b, why in CONFLICTS:
                for x, y in ((c, d), (d, c)):
                    if x is y and (a is not b or len(find([x], a)) < 2):
                        continue
                    if find([x], a) and find([y], b):
                        raise ValueError(f"planner {planner!r}: {_name(x)} ({a.__name__}) does not compose with "
                                         f"{_name(y)} ({b.__name__}): {why}")


def _name(c) -> str:
    return getattr(c, "name", type(c).__name__)

