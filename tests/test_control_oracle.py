import copy

import numpy as np
import pytest
import torch

from rollwise.control.base import StepContext, build_planner
from rollwise.control.oracle import Oracle
from rollwise.core import registry
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Group, Prompt, Rollout


def _rollout(pid, correct, purpose):
    return Rollout(prompt_id=pid, prompt_ids=[1, 2], token_ids_T=torch.arange(3), logprobs_T=torch.full((3,), -0.5),
                   text="x", finish_reason="eos", policy_version=0, purpose=purpose, reward=float(correct),
                   correct=bool(correct))


class FakeSampler:
    """ctx.sample: prompt i gets round(rate[i] * n) correct of n, charged to the ledger by purpose."""

    def __init__(self, rates, ledger):
        self.rates, self.ledger, self.requests = rates, ledger, []

    def __call__(self, requests):
        self.requests += requests
        out = []
        for r in requests:
            k = int(round(self.rates[r.prompt.id] * r.n))
            rolls = [_rollout(r.prompt.id, i < k, r.purpose) for i in range(r.n)]
            self.ledger.charge(rolls)
            out.append(Group(r.prompt, rolls))
        return out


def _ctx(rates, B=4, seed=0):
    N = len(rates)
    pool = [Prompt(i, f"{i}+1=", str(i + 1)) for i in range(N)]
    ledger = Ledger()
    ctx = StepContext(0, B, 8, pool, PromptHistory(N), ledger, np.random.default_rng(seed))
    ctx.sample = FakeSampler(rates, ledger)
    return ctx


def test_registered():
    e = registry.get("planner", "oracle")
    assert e.obj is Oracle and e.provenance == "INF"


def test_never_selects_measured_zero_or_one():
    rates = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.9, 0.0]
    ctx = _ctx(rates)
    out = Oracle(m=16).select(ctx.pool, 8, ctx)
    assert [p.id for p in out] == [2, 3, 6]
    assert ctx.metrics["skipped"] == 5
    reqs = ctx.sample.requests
    assert all(r.purpose == "oracle" and r.n == 16 for r in reqs) and len(reqs) == 8
    # the measurement is off the books: 8 x 16 oracle rollouts, budget untouched
    assert ctx.ledger.rollouts["oracle"] == 128 and ctx.ledger.budget_rollouts() == 0


def test_rank_by_variance():
    ctx = _ctx([0.25, 0.5, 0.875, 0.0])
    out = Oracle(m=8, rank="variance").select(ctx.pool, 4, ctx)
    assert [p.id for p in out] == [1, 0, 2]


def test_planner_requests_only_informative_prompts():
    rng = np.random.default_rng(0)
    rates = rng.choice([0.0, 1.0, 0.5, 0.25], size=400, p=[0.4, 0.4, 0.1, 0.1]).tolist()
    ctx = _ctx(rates, B=16, seed=1)
    planner = build_planner("oracle", 400, ctx.rng)
    reqs = planner.start(ctx)
    assert len(reqs) == 16  # the Planner keeps drawing while too few survive
    assert all(0.0 < rates[r.prompt.id] < 1.0 for r in reqs)
    assert all(r.purpose == "train" for r in reqs)


def test_needs_sampler():
    ctx = _ctx([0.5])
    ctx.sample = None
    with pytest.raises(RuntimeError):
        Oracle().select(ctx.pool, 1, ctx)


def test_state_dict_round_trip():
    ctx = _ctx([0.0, 0.5, 1.0, 0.5])
    o = Oracle(m=4)
    o.select(ctx.pool, 4, ctx)
    o2 = Oracle(m=4)
    o2.load_state_dict(copy.deepcopy(o.state_dict()))
    assert o2.state_dict() == o.state_dict()
    assert (o2.measured_total, o2.skipped_total, o2._measured_step) == (4, 2, 4)


def test_measurement_is_capped_per_step():
    ctx = _ctx([0.0] * 500, B=4)
    planner = build_planner("oracle", 500, ctx.rng, {"oracle": {"m": 4, "max_measured": 8}})
    assert planner.start(ctx) == []  # nothing informative: gives up after 8 x B = 32 candidates
    assert len(ctx.sample.requests) == 32 and planner.components[0]._measured_step == 32
    ctx.step = 1
    ctx.groups = {}
    planner.start(ctx)
    assert len(ctx.sample.requests) == 64  # a new step, a new allowance
