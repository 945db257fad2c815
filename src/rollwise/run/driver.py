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
edits (a rollout of this step that is not in the batch was discarded). Samples pruned in flight (a
wave's watcher) are settled as "pruned" as soon as they come back and leave their groups.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..control.base import Assembled, Decision, Planner, StepContext, Wave
from ..core.history import GroupStats, PromptHistory
from ..core.ledger import Ledger
from ..core.types import Batch, Group, Request
from ..generate.capabilities import InFlight, charged, require, serving
from ..generate.engine import Finished, run_sync
from ..core.staleness import lag_metrics


NOT_TRAINED = {"train": "discarded", "pilot": "scored", "profile": "scored", "oracle": "scored", "eval": "scored"}


@dataclass
class StepOutcome:
    assembled: Assembled
    generated: list[Group]  # every group the engine returned this step (stages, pilots, profiles)
    stats: dict = field(default_factory=dict)  # the learner's
    staleness: dict = field(default_factory=dict)  # policy lag of the trained rollouts
    persist: dict = field(default_factory=dict)  # zero-variance persistence (PromptHistory)
    visits: GroupStats | None = None  # this step's train groups as columns (what the history recorded)

    @property
    def batch(self) -> Batch:
        return self.assembled.batch


class StepDriver:
    def __init__(self, engine, ledger: Ledger, history: PromptHistory | None, scorer=None, policy=None,
                 staleness: bool = True, poll_steps: int = 4):
        self.engine, self.ledger, self.history, self.scorer, self.policy = engine, ledger, history, scorer, policy
        self.measure_staleness = staleness  # the simulator, which reports no staleness, skips the pass
        self.poll_steps = poll_steps  # decode steps between checks of a wave that may stop early
        self._next_id = 0
        self._generated: list[Group] = []

    # ---- Generate (+ score) ---------------------------------------------------------------
    def generate(self, requests) -> list[Group]:
        """Run requests (a list, or a Wave that may stop early); charge them to the ledger; score the
        finished rows. One Group per Request, in order."""
        wave = requests if isinstance(requests, Wave) else None
        requests = wave.requests if wave is not None else requests
        for i, r in enumerate(requests, self._next_id):
            r.id = i
        self._next_id += len(requests)
        # what the wave asks of the engine beyond the protocol, refused by name before any submit when the
        # engine does not declare it (generate/capabilities.py)
        options = dict(wave.options) if wave is not None else {}
        if wave is not None and wave.watch is not None:
            require(self.engine, InFlight)
        if wave is not None and wave.hidden:
            options["hidden"] = True
        used = serving(self.engine, options) if options else []
        with self.ledger.timer("generate"):
            if wave is None or (wave.enough is None and wave.watch is None):
                events = self._run_sync(requests, options)
                groups = [e.group for e in events]
                self._score(groups)
            else:
                events = self._stepwise(requests, wave.enough, wave.watch, options)
                groups = [e.group for e in events]
        self.ledger.charge(groups, sum(e.prompt_tokens for e in events))
        # what the engine reported for a capability the wave used, or one it applies to every wave (Drafts,
        # OwnDrafts: draft tokens verified)
        for cap in charged(self.engine, used):
            cap.charge(self.ledger, events)
        if wave is not None and wave.watch is not None:  # only a watcher's Decisions prune samples
            self._drop_pruned(groups)
        self._generated += groups
        return groups

    def _drop_pruned(self, groups: list[Group]) -> None:
        """Rows pruned in flight are charged, settled as "pruned" and taken out of their (new) groups:
        they never reach the planner's filters, the advantages or the loss."""
        for g in groups:
            if "pruned" in g.statuses():
                pruned = [r for r in g.rollouts if r.status == "pruned"]
                self.ledger.settle([Group(g.prompt, pruned)], "open", "pruned")
                g.rollouts = [r for r in g.rollouts if r.status != "pruned"]

    def _run_sync(self, requests: list[Request], submit: dict) -> list[Finished]:
        """run_sync, except that a request whose prefix is already a finished response (a draft a
        speculator accepted whole) asks the engine for nothing: it comes back as that response."""
        whole = [r.prefix is not None and r.prefix.status == "done" for r in requests]
        if not any(whole):
            return run_sync(self.engine, requests, **submit)
        events = iter(run_sync(self.engine, [r for r, w in zip(requests, whole) if not w], **submit))
        return [Finished(r, Group(r.prompt, [r.prefix]), 0) if w else next(events) for r, w in zip(requests, whole)]

    def _score(self, groups: list[Group]) -> None:
        if self.scorer is None:
            return
        with self.ledger.timer("reward"):
            if all(getattr(r, "status", "done") == "done" for g in groups for r in g.rollouts):
                self.scorer.score(groups)
            else:  # partial rows have no answer yet: their reward comes when they finish
                self.scorer.score([Group(g.prompt, [r for r in g.rollouts if r.status == "done"]) for g in groups])

    def _stepwise(self, requests: list[Request], enough, watch, submit: dict) -> list[Finished]:
        """Poll a few decode steps at a time; once `enough` of the finished requests are in, abort the
        rest (partial rollouts): their partial rows come back with their tokens and log-probs. With a
        `watch`, poll one step at a time and show it every running sample's tokens (with submit option
        `hidden`, also its last-layer hidden state): its Decisions stop samples (so a stop lands on the
        exact token) and give rollouts importance weights and meta entries. `submit`: the engine's submit
        options (checked against its capabilities by `generate`)."""
        eng = self.engine
        hidden = bool(submit.get("hidden"))
        eng.submit(requests, **submit)  # the plain call without options: engines need not take the keywords
        index = {r.id: i for i, r in enumerate(requests)}
        done: dict[int, Finished] = {}
        finished: dict[int, Group] = {}
        marks: dict[int, dict[int, dict]] = {}  # request id -> {sample: entries for its Rollout.meta}

        def take(e: Finished) -> None:
            done[e.request.id] = e
            for j, m in marks.pop(e.request.id, {}).items():
                if j < e.group.n:  # the group holds every sample until _drop_pruned
                    e.group.rollouts[j].meta.update(m)

        while len(done) < len(requests):
            events = [e for e in eng.poll(max_steps=1 if watch else self.poll_steps) if isinstance(e, Finished)]
            if not events and not eng.pending:
                raise RuntimeError(f"engine {type(eng).__name__} stopped with requests unanswered")
            self._score([e.group for e in events])
            for e in events:
                take(e)
                finished[index[e.request.id]] = e.group
            if watch is not None and len(done) < len(requests):
                rest = [r.id for r in requests if r.id not in done]
                running = eng.peek(rest, hidden=True) if hidden else eng.peek(rest)
                for d in watch({index[rid]: samples for rid, samples in running.items()}):
                    self._decide(d, requests[d.index].id, marks)
            if enough is not None and len(done) < len(requests) and enough(finished):
                rest = [r.id for r in requests if r.id not in done]
                for e in eng.abort(rest):
                    take(e)
        return [done[r.id] for r in requests]

    def _decide(self, d: Decision, request_id: int, marks: dict) -> None:
        if d.action not in ("keep", "stop", "pruned"):
            raise ValueError(f"in-flight decision: action must be 'keep', 'stop' or 'pruned', not {d.action!r}")
        if d.weight is not None or d.meta:
            m = marks.setdefault(request_id, {}).setdefault(d.sample, {})
            m.update(d.meta or {})
            if d.weight is not None:
                m["is_weight"] = float(d.weight)
        if d.action != "keep":
            self.engine.stop(request_id, [d.sample], d.action)

    def score_drafts(self, prompt_ids: list[list[int]], drafts_T: list, temperatures: list[float]):
        """A speculator's verification (ctx.score_drafts): one prefill of the current policy over prompt + draft for every row.
        Returns the per-token log-probs and entropies of the draft tokens and the policy's version;
        charges the prompt tokens and every draft token scored (the budget weights those by the
        prefill/decode cost ratio, accepted or not)."""
        with self.ledger.timer("verify"), torch.no_grad():
            logp_NT, ent_NT, _ = self.policy.response_logprobs(prompt_ids, [d.tolist() for d in drafts_T],
                                                               list(temperatures))
        logp_NT, ent_NT = logp_NT.cpu(), ent_NT.cpu()  # the drafts' scores are rollout data: on the CPU
        lens = [len(d) for d in drafts_T]
        self.ledger.charge_verified(sum(len(p) for p in prompt_ids), sum(lens))
        return ([logp_NT[i, :k].detach() for i, k in enumerate(lens)], [ent_NT[i, :k] for i, k in enumerate(lens)],
                self.policy.version)

    def prompt_stats(self, texts: list[str]):
        """The policy's prefill-only prompt statistics (ctx.prompt_stats), their prompt tokens charged as scoring."""
        ent, emb = self.policy.prompt_stats(texts)
        try:
            tokens = sum(len(self.policy.encode(t)) for t in texts)
        except Exception:  # noqa: BLE001 - a policy without a tokenizer interface: count characters
            tokens = sum(len(t) for t in texts)
        self.ledger.charge_scoring(tokens)
        return ent, emb

    # ---- one step ---------------------------------------------------------------------------
    def run_step(self, planner: Planner, ctx: StepContext, learner) -> StepOutcome:
        """One synchronous step: collect (Control, Generate, Filter, Replay), learn, observe."""
        out = self.collect(planner, ctx, learner.version)
        self.learn(out, learner)
        planner.observe(out.batch, ctx)
        self.engine.update_weights(learner.version)
        return out

    def learn(self, out: StepOutcome, learner) -> None:
        """Learn from a collected step: the update, timed, and its compute charged to the ledger (the
        synchronous step and the asynchronous loop's learner both come here)."""
        with self.ledger.timer("learn"):
            out.stats = learner.update(out.batch)
        self.ledger.charge_learner(out.stats)

    def collect(self, planner: Planner, ctx: StepContext, version: int) -> StepOutcome:
        """Everything of a step before the update: run the planner's coroutine against the engine,
        settle fates, record the history. `version` is the policy version that will train the batch
        (staleness is measured against it). The asynchronous loop calls this ahead of the learner."""
        self._generated = []
        if self.policy is not None and ctx.prompt_stats is None and hasattr(self.policy, "prompt_stats"):
            ctx.prompt_stats = self.prompt_stats
        if self.policy is not None and ctx.score_drafts is None and hasattr(self.policy, "response_logprobs"):
            ctx.score_drafts = self.score_drafts
        planner.version = version
        plan = planner.plan(ctx)
        try:
            requests = next(plan)
            while True:
                requests = plan.send(self.generate(requests))
        except StopIteration as stop:
            assembled: Assembled = stop.value
        self.settle(assembled, ctx, partial=planner.partial)
        out = StepOutcome(assembled, self._generated)
        if self.history is not None:
            groups = list(ctx.groups.values())
            out.visits = v = GroupStats.of(groups)
            trained = assembled.batch.groups
            if len(v) == len(groups) == len(trained) and all(a is b for a, b in zip(trained, groups)):
                assembled.batch.stats = v  # every group of the step trains: they are the batch's counts too
            out.persist = self.history.zero_variance_persistence(out.visits)  # before recording
            self.history.record(out.visits, ctx.step)
        if self.measure_staleness:
            out.staleness = lag_metrics(assembled.batch, version)
        return out

    def settle(self, assembled: Assembled, ctx: StepContext, partial: bool = False) -> None:
        """Fates of this step's rollouts: in the batch -> trained; otherwise train rollouts ->
        discarded and measurements (pilot, profile, oracle) -> scored. Only rollouts charged this step
        are "open"; rollouts of earlier steps in the batch (reused, replayed, committed pilots) keep
        their fate and count as reused tokens."""
        led, batch = self.ledger, assembled.batch
        # partial rollouts: rows of groups still out wait as carried; rows too stale to resume are aborted
        led.settle(assembled.carried, "open", "carried")
        led.settle(assembled.dropped, "carried", "aborted")
        trained_now = led.settle(batch.groups, "open", "trained")
        if led.count(fate="carried") or led.count_rollouts(fate="carried"):  # partial rows of earlier steps
            trained_now += led.settle(batch.groups, "carried", "trained")
        led.count_reused(batch.groups, trained_now)
        in_batch = {id(g) for g in batch.groups}  # trained whole: nothing of theirs is left open
        led.settle([g for g in self._generated if id(g) not in in_batch], "open", NOT_TRAINED)
        if partial:  # a resumed group that finished and was filtered out: its carried rows were discarded
            led.settle([g for g in list(ctx.groups.values()) + assembled.final if id(g) not in in_batch],
                       "carried", {"train": "discarded"})
        if led.count_rollouts(fate="open"):
            raise RuntimeError("a planner dropped rollouts from a group in place, so their tokens cannot be "
                               "settled; return a new Group from finish() instead of editing one")

