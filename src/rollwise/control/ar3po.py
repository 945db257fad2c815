"""AR3PO: Adaptive Rollout and Response Reuse Policy Optimization ("Improving Sampling Efficiency in
RLVR through Adaptive Rollout and Response Reuse", arXiv 2509.25808; no code released).

Adaptive rollout: responses come in stages of k; a prompt stops as soon as it has one correct
response, so easy prompts cost k and hard ones up to S*k. Response reuse: a prompt still without a
correct response after S stages gets a correct response stored from an earlier step.

Rule ([ABS]/[SEC] mechanism; [INF] details)::

    stage 1: k responses per prompt                                   (allocate)
    stage s = 2..S: k more for every prompt with no correct response  (more)   [SEC: stop at first correct]
    after the last stage, a group with 0 correct and a non-empty buffer[x]:
        add (reuse="add") or swap in (reuse="replace") one stored correct response   (finish)
    buffer[x] <- newest correct fresh responses of x, at most `keep` of them      (observe) [INF]
    groups still zero-variance are dropped (drop_zero_variance) [INF]            (accept)

The reused response is a copy of a rollout from an earlier step: it keeps its policy_version and
behaviour log-probs (mu), so a learner that recomputes old_log_prob treats it as on-policy (the
[INF] default in the spec) and a correction that reads mu sees its true staleness. It was charged
to the ledger when first generated and is not charged again (the driver counts it as reused). With
reuse="replace" the fresh response it displaces leaves the group, and the driver settles it as
discarded.

Defaults [INF; the paper's k, S and buffer size were not retrieved; scaled to the embedded n = 8]:
k = n/2 = 4, S = 4 (at most 2n = 16 responses for a hard prompt, 4 for an easy one; the paper
reports a final average of 5.7 responses per prompt), keep = 1, reuse = "add".
Buffer memory grows with the number of distinct prompts ever solved (keep rollouts each).
"""
from __future__ import annotations

from dataclasses import replace

from ..core.registry import register
from ..core.types import Batch, Group, Prompt, Request, Rollout
from .base import Component, StepContext
from .capabilities import SetsN, Staged


@register("planner", "ar3po", provenance="ABS+SEC+INF",
          summary="AR3PO: staged rollout until a correct response, reuse stored correct responses")
class AR3PO(Component):
    needs_sampling = True  # stages: more samples after seeing the first ones
    declares = (SetsN(), Staged())  # the `more` hook: stages

    def __init__(self, k: int = 4, stages: int = 4, keep: int = 1, reuse: str = "add",
                 drop_zero_variance: bool = True):
        if k < 1 or stages < 1 or keep < 1:
            raise ValueError("ar3po: need k, stages, keep >= 1")
        if reuse not in ("add", "replace", "none"):
            raise ValueError(f"ar3po: reuse must be add, replace or none, not {reuse!r}")
        self.k, self.stages, self.keep, self.reuse = int(k), int(stages), int(keep), reuse
        self.drop_zero_variance = bool(drop_zero_variance)
        self.buffer: dict[int, list[Rollout]] = {}  # prompt id -> newest correct responses
        self._stage: dict[int, int] = {}  # this step: prompt id -> stages generated
        self._reused: set[int] = set()  # this step: prompt ids that got a reused response
        self._reused_objs: set[int] = set()  # id() of this step's reused copies (never re-stored)

    def begin_step(self, ctx: StepContext) -> None:
        self._stage, self._reused, self._reused_objs = {}, set(), set()

    # ---- hooks ---------------------------------------------------------------------------------
    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        for p in prompts:
            self._stage[p.id] = 1
        return [self.k] * len(prompts)

    def more(self, groups: list[Group], ctx: StepContext) -> list[Request]:
        out = []
        for g in groups:
            pid = g.prompt.id
            stage = self._stage.setdefault(pid, max(1, -(-g.n // self.k)))
            if g.num_correct == 0 and stage < self.stages:
                self._stage[pid] = stage + 1
                out.append(Request(g.prompt, self.k))
        return out

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        out = []
        for g in groups:
            stored = self.buffer.get(g.prompt.id)
            if self.reuse == "none" or g.num_correct > 0 or not stored:
                out.append(g)
                continue
            reused = replace(stored[-1], token_ids_T=stored[-1].token_ids_T.clone(),
                             logprobs_T=stored[-1].logprobs_T.clone(), prompt_ids=list(stored[-1].prompt_ids))
            rollouts = list(g.rollouts)
            if self.reuse == "replace" and rollouts:
                rollouts = rollouts[:-1]  # the displaced response is discarded (the driver charges it)
            out.append(Group(g.prompt, rollouts + [reused]))
            self._reused.add(g.prompt.id)
            self._reused_objs.add(id(reused))
        ctx.metrics["ar3po/reused"] = float(len(self._reused))
        return out

    def accept(self, group: Group, ctx: StepContext) -> bool:
        return not (self.drop_zero_variance and group.zero_variance)

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        # ctx.groups hold this step's fresh responses (finish built new Group objects; the reused
        # copies are skipped by identity in case a loop writes the finished groups back)
        n_resp = 0
        for g in groups:
            fresh = [r for r in g.rollouts if id(r) not in self._reused_objs]
            n_resp += len(fresh)
            correct = [r for r in fresh if r.correct]
            if correct:
                self.buffer[g.prompt.id] = (self.buffer.get(g.prompt.id, []) + correct)[-self.keep:]
        if groups:
            ctx.metrics["ar3po/mean_n"] = n_resp / len(groups)
        ctx.metrics["ar3po/buffer_prompts"] = float(len(self.buffer))

    # ---- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"buffer": {pid: [r.to_state() for r in rs] for pid, rs in self.buffer.items()},
                "stage": dict(self._stage), "reused": sorted(self._reused)}

    def load_state_dict(self, s: dict) -> None:
        self.buffer = {int(pid): [Rollout.from_state(d) for d in rs] for pid, rs in s["buffer"].items()}
        self._stage = {int(k): int(v) for k, v in s["stage"].items()}
        self._reused = {int(x) for x in s["reused"]}
