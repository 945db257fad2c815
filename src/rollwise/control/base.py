"""The planner API (Control stage): which prompts get rollouts, how many, and which groups train.

A planner is a list of small *components*, each overriding only the hooks it needs. Components
compose by a spec string such as ``greso+ar3po`` or ``prompt-replay+dapo``: the Planner runs every
component's hook in order. This is the contract third parties implement; keep it small.

Hooks, in the order one step calls them::

    setup(ctx)                     once, before the first step (offline profiling: sGPO, PVPO)
    select(candidates, need, ctx)  pre-rollout: keep/skip/reorder/add prompts (GRESO, HIVE, CDAS, ...)
    allocate(prompts, ns, ctx)     n per prompt (sGPO, CurES, E3, DUET); returns the new ns
    more(groups, ctx)              after each generation round: extra Requests for prompts already
                                   rolled out this step (AR3PO, AERO, DARS stages); [] when done
    finish(groups, ctx)            before the batch: repair/trim/reuse groups (AR3PO reuse, AERO rejection)
    accept(group, ctx)             may this group train? (DAPO's zero-variance filter)
    observe(groups, batch, ctx)    after the update: update the component's own state

A component that sets ``refill = True`` makes the planner draw fresh prompts while fewer than
``batch_size`` groups are accepted, for at most ``max_rounds`` rounds (DAPO dynamic sampling).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core.history import PromptHistory
from ..core.ledger import Ledger
from ..core.types import Batch, Group, Prompt, Request


@dataclass
class StepContext:
    """What a component may read (and use) during one step."""

    step: int
    batch_size: int  # B: groups the learner wants per step
    n: int  # default group size
    pool: list[Prompt]  # the train pool; Prompt.id indexes it and the history
    history: PromptHistory
    ledger: Ledger
    rng: np.random.Generator  # the planner's own stream (saved in checkpoints)
    policy: Any = None  # rollwise.policy.Policy: prompt_stats() for HIVE / DOTS
    # sample(requests) -> groups: generate + score off the train path (purpose taken from each
    # Request: "profile", "oracle", "pilot", ...). Charged to the ledger like every rollout.
    sample: Callable[[list[Request]], list[Group]] | None = None
    groups: dict[int, Group] = field(default_factory=dict)  # this step's groups so far, by prompt id
    metrics: dict[str, float] = field(default_factory=dict)  # components may add step metrics here


class Component:
    """Base class: every hook is a no-op. Override what your method needs."""

    name = "component"
    provenance = "INF"
    refill = False  # draw fresh prompts until batch_size groups are accepted
    max_rounds = 1
    oversample = 1  # candidates drawn per needed prompt (ranking selectors want more to choose from)

    def setup(self, ctx: StepContext) -> None:
        pass

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        return candidates

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        return ns

    def more(self, groups: list[Group], ctx: StepContext) -> list[Request]:
        return []

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        return groups

    def accept(self, group: Group, ctx: StepContext) -> bool:
        return True

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        pass

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


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


class Planner:
    """Runs a list of components through one step. See the module docstring for the hook order."""

    def __init__(self, components: list[Component], pool_size: int, rng: np.random.Generator):
        self.components = components
        self.rng = rng
        self.sampler = PoolSampler(pool_size, rng)
        self.round = 0
        self._set_up = False

    @property
    def name(self) -> str:
        return "+".join(c.name for c in self.components)

    # ---- the step ------------------------------------------------------------------------
    def start(self, ctx: StepContext) -> list[Request]:
        if not self._set_up:
            for c in self.components:
                c.setup(ctx)
            self._set_up = True
        self.round = 1
        return self._draw(ctx.batch_size, ctx)

    def more(self, groups: list[Group], ctx: StepContext) -> list[Request]:
        requests = [r for c in self.components for r in c.more(groups, ctx)]
        if requests:
            return requests
        if any(c.refill for c in self.components):
            accepted = sum(self._accepts(g, ctx) for g in ctx.groups.values())
            max_rounds = max(c.max_rounds for c in self.components if c.refill)
            if accepted < ctx.batch_size and self.round < max_rounds:
                self.round += 1
                return self._draw(ctx.batch_size - accepted, ctx)
        return []

    def assemble(self, ctx: StepContext) -> tuple[Batch, list[Group]]:
        """Final groups -> (train batch, rejected groups). Refill planners train on at most B groups
        (DAPO keeps the first B; the surplus is discarded, not carried over)."""
        groups = list(ctx.groups.values())
        for c in self.components:
            groups = c.finish(groups, ctx)
        kept = [g for g in groups if self._accepts(g, ctx)]
        if any(c.refill for c in self.components):
            kept = kept[: ctx.batch_size]
        kept_ids = {id(g) for g in kept}
        rejected = [g for g in groups if id(g) not in kept_ids]
        return Batch(kept, ctx.step), rejected

    def observe(self, batch: Batch, ctx: StepContext) -> None:
        for c in self.components:
            c.observe(list(ctx.groups.values()), batch, ctx)

    # ---- helpers -------------------------------------------------------------------------
    def _accepts(self, g: Group, ctx: StepContext) -> bool:
        return all(c.accept(g, ctx) for c in self.components)

    def _draw(self, need: int, ctx: StepContext) -> list[Request]:
        """Draw candidates from the pool and pass them through every selector until `need` prompts
        survive or a full pass over the pool has been drawn (selectors may skip everything)."""
        oversample = max(c.oversample for c in self.components)
        chosen: list[Prompt] = []
        seen = set(ctx.groups)
        drawn = 0
        while len(chosen) < need and drawn < len(ctx.pool):
            k = min((need - len(chosen)) * oversample, len(ctx.pool) - drawn)
            cands = [ctx.pool[i] for i in self.sampler.next(k)]
            drawn += k
            for c in self.components:
                cands = c.select(cands, need - len(chosen), ctx)
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
        return {"sampler": self.sampler.state_dict(), "set_up": self._set_up,
                "components": [c.state_dict() for c in self.components]}

    def load_state_dict(self, s: dict) -> None:
        self.sampler.load_state_dict(s["sampler"])
        self._set_up = bool(s["set_up"])
        for c, cs in zip(self.components, s["components"]):
            c.load_state_dict(cs)


def build_planner(spec: str | list[str], pool_size: int, rng: np.random.Generator,
                  options: dict[str, dict] | None = None) -> Planner:
    """`"greso+ar3po"` or `["greso", "ar3po"]` -> Planner. `options[name]` are keyword arguments
    for that component's constructor (from the config file's `planner_options`)."""
    from ..core import registry

    names = spec.split("+") if isinstance(spec, str) else list(spec)
    options = options or {}
    comps = []
    for name in names:
        name = name.strip()
        entry = registry.get("planner", name)
        comps.append(entry.obj(**options.get(name, {})))
    return Planner(comps, pool_size, rng)
