import copy

import numpy as np
import pytest

from rollwise.control.base import Planner, StepContext, build_planner
from rollwise.control.oracle import Oracle
from rollwise.core import registry
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Prompt
from rollwise.run.driver import StepDriver

from fakes import Engine, drive


def _ctx(rates, B=4, seed=0):
    """(ctx, engine): prompt i gets floor(rate[i] * n) correct of its first n samples (the scripted
    engine; the same counts as the old sampler's round(rate * n) for every rate and n used here)."""
    N = len(rates)
    pool = [Prompt(i, f"{i}+1=", str(i + 1)) for i in range(N)]
    ctx = StepContext(0, B, 8, pool, PromptHistory(N), Ledger(), np.random.default_rng(seed))
    return ctx, Engine(list(rates))


def train_requests(planner, ctx, engine):
    """Run the step's plan, its measurements generated through the driver by `engine`, until it asks
    for train rollouts: the first round's Requests ([] if the step ends without any)."""
    driver = StepDriver(engine, ctx.ledger, None)
    plan = planner.plan(ctx)
    try:
        reqs = next(plan)
        while not all(q.purpose == "train" for q in reqs):
            reqs = plan.send(driver.generate(reqs))
    except StopIteration:
        return []
    return reqs


def test_registered():
    e = registry.get("planner", "oracle")
    assert e.obj is Oracle and e.provenance == "INF"


def test_never_selects_measured_zero_or_one():
    rates = [0.0, 1.0, 0.5, 0.25, 1.0, 0.0, 0.9, 0.0]
    ctx, eng = _ctx(rates)
    out = drive(Oracle(m=16).select(ctx.pool, 8, ctx), eng, ctx)
    assert [p.id for p in out] == [2, 3, 6]
    assert ctx.metrics["skipped"] == 5
    reqs = eng.requests
    assert all(r.purpose == "oracle" and r.n == 16 for r in reqs) and len(reqs) == 8
    # the measurement is off the books: 8 x 16 oracle rollouts, budget untouched
    assert ctx.ledger.count_rollouts("oracle") == 128 and ctx.ledger.budget_rollouts() == 0
    assert ctx.ledger.budget_tokens() == 0 and ctx.ledger.count("oracle") == 128 * 3


def test_rank_by_variance():
    ctx, eng = _ctx([0.25, 0.5, 0.875, 0.0])
    out = drive(Oracle(m=8, rank="variance").select(ctx.pool, 4, ctx), eng, ctx)
    assert [p.id for p in out] == [1, 0, 2]


def test_planner_requests_only_informative_prompts():
    rng = np.random.default_rng(0)
    rates = rng.choice([0.0, 1.0, 0.5, 0.25], size=400, p=[0.4, 0.4, 0.1, 0.1]).tolist()
    ctx, eng = _ctx(rates, B=16, seed=1)
    planner = build_planner("oracle", 400, ctx.rng)
    reqs = train_requests(planner, ctx, eng)
    assert len(reqs) == 16  # the Planner keeps drawing while too few survive
    assert all(0.0 < rates[r.prompt.id] < 1.0 for r in reqs)
    assert all(r.purpose == "train" for r in reqs)


def test_needs_sampler():
    ctx, _ = _ctx([0.5])
    planner = Planner([Oracle()], 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="oracle"):  # a host that cannot sample is refused by name
        planner.require("a host", sampling=False, policy=True, refill=True)
    planner.require("a host", sampling=True)  # one that can passes
    with pytest.raises(ValueError, match="oracle"):  # and the host-side select will not run it
        planner.select(ctx.pool, 1, ctx)


def test_state_dict_round_trip():
    ctx, eng = _ctx([0.0, 0.5, 1.0, 0.5])
    o = Oracle(m=4)
    drive(o.select(ctx.pool, 4, ctx), eng, ctx)
    o2 = Oracle(m=4)
    o2.load_state_dict(copy.deepcopy(o.state_dict()))
    assert o2.state_dict() == o.state_dict()
    assert (o2.measured_total, o2.skipped_total, o2._measured_step) == (4, 2, 4)


def test_measurement_is_capped_per_step():
    ctx, eng = _ctx([0.0] * 500, B=4)
    planner = build_planner("oracle", 500, ctx.rng, {"oracle": {"m": 4, "max_measured": 8}})
    assert train_requests(planner, ctx, eng) == []  # nothing informative: gives up after 8 x B = 32 candidates
    assert len(eng.requests) == 32 and planner.components[0]._measured_step == 32
    ctx.step = 1
    ctx.groups = {}
    train_requests(planner, ctx, eng)
    assert len(eng.requests) == 64  # a new step, a new allowance
