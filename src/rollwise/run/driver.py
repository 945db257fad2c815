"""The step driver: one control flow for a training step, whoever samples and whoever learns.

The Trainer (torch or any registered engine), the Simulator (population engine, dynamics learner) and
the tests (scripted engines, fake learners) all run a step through `StepDriver.run_step`:

    plan = planner.plan(ctx)                 Control: a coroutine that yields lists of Requests
    groups = driver.generate(requests)       Generate: submit, poll until done, charge, score
    ... sent back to the plan until it returns the Assembled batch
    settle fates                             trained / discarded (filtered or trimmed) / scored
    history.record(this step's groups)
    stats = learner.update(batch)            Learn (a Learner, the simulator's dynamics, a fake)
    planner.observe(batch, ctx)
    engine.update_weights(learner.version)

The driver is the only writer of the ledger: it charges every engine result as it comes back and
settles every rollout's fate once the batch is known. Planners edit groups; the driver charges the
edits (a rollout of this step that is not in the batch was discarded).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..control.base import Assembled, Planner, StepContext
from ..core.history import PromptHistory
from ..core.ledger import Ledger
from ..core.types import Batch, Group, Request
from ..generate.engine import run_sync


NOT_TRAINED = {"train": "discarded", "pilot": "scored", "profile": "scored", "oracle": "scored", "eval": "scored"}


@dataclass
class StepOutcome:
    assembled: Assembled
    generated: list[Group]  # every group the engine returned this step (stages, pilots, profiles)
    stats: dict = field(default_factory=dict)  # the learner's
    staleness: dict = field(default_factory=dict)  # policy lag of the trained rollouts
    persist: dict = field(default_factory=dict)  # zero-variance persistence (PromptHistory)

    @property
    def batch(self) -> Batch:
        return self.assembled.batch


class StepDriver:
    def __init__(self, engine, ledger: Ledger, history: PromptHistory | None, scorer=None, policy=None,
                 staleness: bool = True):
        self.engine, self.ledger, self.history, self.scorer, self.policy = engine, ledger, history, scorer, policy
        self.measure_staleness = staleness  # the simulator, which reports no staleness, skips the pass
        self._next_id = 0
        self._generated: list[Group] = []

    # ---- Generate (+ score) ---------------------------------------------------------------
    def generate(self, requests: list[Request]) -> list[Group]:
        """Run requests synchronously; charge them to the ledger; score them. One Group per Request."""
        for i, r in enumerate(requests, self._next_id):
            r.id = i
        self._next_id += len(requests)
        with self.ledger.timer("generate"):
            events = run_sync(self.engine, requests)
        groups = [e.group for e in events]
        self.ledger.charge(groups, sum(e.prompt_tokens for e in events))
        if self.scorer is not None:
            with self.ledger.timer("reward"):
                self.scorer.score(groups)
        self._generated += groups
        return groups

    def prompt_stats(self, texts: list[str]):
        """The policy's prefill-only prompt statistics (HIVE, DOTS), their prompt tokens charged."""
        ent, emb = self.policy.prompt_stats(texts)
        try:
            self.ledger.prompt_tokens += sum(len(self.policy.encode(t)) for t in texts)
        except Exception:  # noqa: BLE001 - a policy without a tokenizer interface: count characters
            self.ledger.prompt_tokens += sum(len(t) for t in texts)
        return ent, emb

    # ---- one step ---------------------------------------------------------------------------
    def run_step(self, planner: Planner, ctx: StepContext, learner) -> StepOutcome:
        self._generated = []
        if self.policy is not None and ctx.prompt_stats is None and hasattr(self.policy, "prompt_stats"):
            ctx.prompt_stats = self.prompt_stats
        plan = planner.plan(ctx)
        try:
            requests = next(plan)
            while True:
                requests = plan.send(self.generate(requests))
        except StopIteration as stop:
            assembled: Assembled = stop.value
        self.settle(assembled.batch)
        out = StepOutcome(assembled, self._generated)
        if self.history is not None:
            out.persist = self.history.zero_variance_persistence(ctx.groups.values())  # before recording
            self.history.record(ctx.groups.values(), ctx.step)
        if self.measure_staleness:
            out.staleness = staleness(assembled.batch, learner.version)
        with self.ledger.timer("learn"):
            out.stats = learner.update(assembled.batch)
        planner.observe(assembled.batch, ctx)
        self.engine.update_weights(learner.version)
        return out

    def settle(self, batch: Batch) -> None:
        """Fates of this step's rollouts: in the batch -> trained; otherwise train rollouts ->
        discarded and measurements (pilot, profile, oracle) -> scored. Only rollouts charged this step
        are "open"; rollouts of earlier steps in the batch (reused, replayed, committed pilots) keep
        their fate and count as reused tokens."""
        led = self.ledger
        trained_now = led.settle(batch.groups, "open", "trained")
        led.reused_tokens += sum(g.tokens for g in batch.groups) - trained_now
        in_batch = {id(g) for g in batch.groups}  # trained whole: nothing of theirs is left open
        led.settle([g for g in self._generated if id(g) not in in_batch], "open", NOT_TRAINED)
        if led.count_rollouts(fate="open"):
            raise RuntimeError("a planner dropped rollouts from a group in place, so their tokens cannot be "
                               "settled; return a new Group from finish() instead of editing one")


def staleness(batch: Batch, version: int) -> dict:
    """Policy lag of the trained rollouts, measured before the update: the learner's version - the
    oldest version among a rollout's tokens. 0 in synchronous on-policy training; reused and replayed
    rollouts lag (and so will asynchronous ones)."""
    n = sum(g.n for g in batch.groups)
    if not n:
        return {"staleness_max": 0, "staleness_mean": 0.0}
    lag_sum, lag_max = 0, 0
    for g in batch.groups:
        for v, k in g.versions().items():
            lag_sum += (version - v) * k
            lag_max = max(lag_max, version - v)
    return {"staleness_max": int(lag_max), "staleness_mean": lag_sum / n}
