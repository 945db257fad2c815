"""A new engine capability needs no framework file: this file defines one (a prefill-only score of each
prompt, charged as scoring tokens), an engine that declares it, and a component that asks for it, and runs
them through the real Planner, StepDriver, Ledger and conformance kit. Nothing under src/ knows its name."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from rollwise.control.base import Component, Planner, Wave
from rollwise.control.capabilities import Speculator
from rollwise.core.types import Prompt
from rollwise.generate.capabilities import EngineCapability, declared
from rollwise.generate.torch_engine import TorchEngine
from rollwise.run.driver import StepDriver
from rollwise.testing import check_engine
from rollwise.testing.engine_kit import _require

from fakes import Learner, make_ctx
from test_engine_policy import tiny_policy

NAME = "prompt_scores"


@dataclass(frozen=True)
class PromptScores(EngineCapability):
    """submit(requests, score_prompts=True): every row carries meta["prompt_len"], the prompt's length in
    tokens, and the engine prefills each prompt once more to score it (charged as scoring tokens)."""

    name: ClassVar[str] = NAME
    title: ClassVar[str] = "prompt scores"
    options: ClassVar[tuple[str, ...]] = ("score_prompts",)
    offers: ClassVar[str] = "score prompts (submit(requests, score_prompts=True))"

    def charge(self, ledger, events: list) -> None:
        ledger.charge_scoring(sum(len(e.group.rollouts[0].prompt_ids) for e in events if e.group.rollouts))

    def check(self, kit) -> None:
        eng = kit.engine()
        reqs = kit.requests([2, 1])
        eng.submit(reqs, score_prompts=True)
        for e in kit.drain(eng, reqs, {}):
            for r in e.group.rollouts:
                _require(r.meta.get("prompt_len") == len(r.prompt_ids), "prompt scores",
                         f"request {e.request.id}: a row without its prompt's length in meta")


class ScoringEngine(TorchEngine):
    capabilities = TorchEngine.capabilities + (PromptScores(),)

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._scored: set[int] = set()

    def submit(self, requests, hidden=False, drafter=None, score_prompts=False):
        super().submit(requests, hidden=hidden, drafter=drafter)
        if score_prompts:
            self._scored |= {r.id for r in requests}

    def poll(self, max_steps=None):
        events = super().poll(max_steps)
        for e in events:
            if e.request.id in self._scored:
                self._scored.discard(e.request.id)
                for r in e.group.rollouts:
                    r.meta["prompt_len"] = len(r.prompt_ids)
        return events


class ForgetsScores(ScoringEngine):
    def submit(self, requests, hidden=False, drafter=None, score_prompts=False):
        super().submit(requests, hidden=hidden, drafter=drafter)  # takes the keyword, never scores


class ScoresPrompts(Component):
    """Runs each round's train requests with the engine's prompt scores."""

    name = "scores-prompts"
    declares = (Speculator(),)

    def speculate(self, requests, ctx):
        return (yield Wave(requests, options={"score_prompts": True}))


def make(cls=ScoringEngine):
    pol = tiny_policy()
    return (lambda **kw: cls(pol, **kw)), pol


def test_the_kit_checks_a_capability_it_has_never_heard_of():
    mk, pol = make()
    ran = check_engine(mk, policy=pol, capabilities=[PromptScores], logprob_tol=None)
    assert "declared capabilities" in ran and ran[-1] == "prompt scores"
    assert NAME in {type(c).name for c in declared(mk())}
    mk, pol = make(ForgetsScores)
    with pytest.raises(AssertionError, match=r"\[prompt scores\]: request \d+: a row without"):
        check_engine(mk, policy=pol, capabilities=[PromptScores], logprob_tol=None)


def test_the_driver_passes_its_options_and_charges_it_through_the_ledger():
    """Two prompts, 2 rows each, 3 new tokens: the rows carry the engine's scores, and the capability's charge
    adds each request's prompt once to the scoring tokens (a ledger method), beside the ordinary charges."""
    pol = tiny_policy()
    ctx = make_ctx(pool_size=2, B=2, n=2)
    ctx.pool = [Prompt(0, "12+3=", "15"), Prompt(1, "7=", "7")]
    planner = Planner([ScoresPrompts()], 2, ctx.rng)
    out = StepDriver(ScoringEngine(pol, temperature=1.0, max_new_tokens=3, seed=0), ctx.ledger,
                     ctx.history).run_step(planner, ctx, Learner())
    rows = [r for g in out.batch.groups for r in g.rollouts]
    assert len(rows) == 4 and all(r.meta["prompt_len"] == len(r.prompt_ids) for r in rows)
    assert ctx.ledger.scoring_tokens == sum(len(g.rollouts[0].prompt_ids) for g in out.batch.groups) > 0
    assert ctx.ledger.verified_tokens == 0  # another capability's charge did not run


def test_an_engine_without_it_is_refused_by_name_before_any_submit():
    pol = tiny_policy()
    ctx = make_ctx(pool_size=2, B=2, n=2)
    ctx.pool = [Prompt(0, "12+3=", "15"), Prompt(1, "7=", "7")]
    eng = TorchEngine(pol, max_new_tokens=3, seed=0)
    with pytest.raises(ValueError, match=r"^engine TorchEngine does not score prompts \(submit\(requests, "
                                         r"score_prompts=True\)\), which this planner needs"):
        StepDriver(eng, ctx.ledger, ctx.history).run_step(Planner([ScoresPrompts()], 2, ctx.rng), ctx, Learner())
    assert eng.pending == 0 and ctx.ledger.tokens == {}


def test_no_framework_file_names_it():
    src = Path(__file__).resolve().parent.parent / "src" / "rollwise"
    assert not [p for p in src.rglob("*.py") if "score_prompts" in p.read_text() or NAME in p.read_text()]


def test_a_capability_applied_to_every_wave_is_charged_once_on_each():
    """An engine that drafts every row itself (OwnDrafts, vLLM's ngram) is charged the draft tokens its events
    report on a plain wave that asked for nothing; one whose Drafts are charged always (vLLM's history
    drafts) is charged them once on a wave that used them, and on one that did not."""
    from rollwise.core.ledger import Ledger
    from rollwise.core.types import Request
    from rollwise.generate.capabilities import Drafts, OwnDrafts

    pol = tiny_policy()

    def reporting(caps):
        class Reports(TorchEngine):
            capabilities = caps

            def poll(self, max_steps=None):
                events = super().poll(max_steps)
                for e in events:
                    e.verified_tokens = 5
                return events
        return Reports(pol, temperature=1.0, max_new_tokens=3, seed=0)

    requests = lambda: [Request(Prompt(0, "12+3=", "15"), 2), Request(Prompt(1, "7=", "7"), 1)]  # noqa: E731
    drafter = {"drafter": lambda q, j, t: []}
    for caps, options, want in (((OwnDrafts(),), {}, 10), ((Drafts(always=True),), drafter, 10),
                                ((Drafts(always=True),), {}, 10), ((Drafts(),), {}, 0),
                                (TorchEngine.capabilities, {}, 0)):
        ledger = Ledger()
        StepDriver(reporting(caps), ledger, None).generate(Wave(requests(), options=options) if options else requests())
        assert ledger.verified_tokens == want, caps
