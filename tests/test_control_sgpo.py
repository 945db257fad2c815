"""sGPO: n = clip(ceil(1/p0)), offline profiling (requests the driver generates), filter, curriculum order."""
import pickle

import numpy as np

from rollwise.control.base import Planner
from rollwise.control.sgpo import SGPO, group_size
from rollwise.run.driver import StepDriver

from fakes import drive, make_sampled_ctx


def train_requests(planner, ctx, engine):
    """Run the step's plan, its profiles generated through the driver by `engine`, until it asks for
    train rollouts: the first round's Requests."""
    driver = StepDriver(engine, ctx.ledger, None)
    plan = planner.plan(ctx)
    reqs = next(plan)
    while not all(q.purpose == "train" for q in reqs):
        reqs = plan.send(driver.generate(reqs))
    return reqs


def test_group_size_rule():
    assert group_size(1.0, 2, 16) == 2  # ceil(1) = 1 -> G_min
    assert group_size(0.5, 2, 16) == 2
    assert group_size(0.25, 2, 16) == 4
    assert group_size(1 / 3, 2, 16) == 3
    assert group_size(1 / 49, 2, 100) == 49  # 1/(1/49) = 49.00000000000001 must not round up to 50
    assert group_size(0.3, 2, 16) == 4  # ceil(3.33)
    assert group_size(0.1, 2, 16) == 10
    assert group_size(0.05, 2, 16) == 16  # ceil(20) clipped to G_max
    assert group_size(0.0, 2, 16) == 16  # unsolvable -> G_max


def test_setup_profiles_filters_and_orders():
    rates = {0: 1.0, 1: 0.25, 2: 0.0, 3: 0.75, 4: 0.5, 5: 0.0, 6: 0.25, 7: 1.0}
    ctx, eng = make_sampled_ctx(rates)
    c = SGPO(profile_k=4, rho=0.0, chunk=3)
    drive(c.setup(ctx), eng, ctx)
    assert ctx.ledger.count_rollouts("profile") == 8 * 4 and ctx.ledger.count_rollouts("train") == 0
    assert eng.calls == [3, 3, 2]  # chunked
    assert np.allclose(c.p0, [1.0, 0.25, 0.0, 0.75, 0.5, 0.0, 0.25, 1.0])
    assert c.kept.tolist() == [False, True, False, True, True, False, True, False]  # rho = 0 drops p0 = 0
    assert c.order.tolist()[:2] == [3, 4] and set(c.order.tolist()[2:]) == {1, 6}  # easy -> hard
    keep_all_zero = SGPO(rho=1.0)
    keep_all_zero.set_profile(np.array([0.0, 0.0, 1.0, 0.5]), np.random.default_rng(0))
    assert keep_all_zero.kept.tolist() == [True, True, False, True]
    frac = SGPO(rho=0.25)
    frac.set_profile(np.zeros(4000), np.random.default_rng(0))
    assert 0.2 < frac.kept.mean() < 0.3


def test_curriculum_select_and_allocate_through_planner():
    rates = {0: 1.0, 1: 0.25, 2: 0.0, 3: 0.75, 4: 0.5, 5: 0.125}
    ctx, eng = make_sampled_ctx(rates, B=2)
    c = SGPO(profile_k=8, rho=1.0)
    planner = Planner([c], 6, np.random.default_rng(0))
    order = []
    for step in range(5):
        ctx.step, ctx.groups = step, {}
        reqs = train_requests(planner, ctx, eng)
        order += [(q.prompt.id, q.n) for q in reqs]
    assert [q.purpose for q in eng.submitted[0]] == ["profile"] * 6 and len(eng.submitted) == 1  # setup, once
    # kept: everything but prompt 0 (p0 = 1); easy -> hard; n = clip(ceil(1/p0), 2, 16)
    assert order[:5] == [(3, 2), (4, 2), (1, 4), (5, 8), (2, 16)]
    assert order[5:10] == order[:5]  # next epoch: same order (no ties to reshuffle)
    assert c.epoch == 1
    free = SGPO(curriculum=False, rho=1.0)
    free.set_profile(np.array([1.0, 0.25, 0.0, 0.75, 0.5, 0.125]), np.random.default_rng(0))
    assert [p.id for p in free.select(ctx.pool, 6, ctx)] == [1, 2, 3, 4, 5]


def test_state_dict_round_trip_resumes_curriculum():
    rates = {i: [0.0, 0.25, 0.5, 0.75, 1.0][i % 5] for i in range(20)}
    ctx, eng = make_sampled_ctx(rates)
    c = SGPO()
    drive(c.setup(ctx), eng, ctx)
    c.select(ctx.pool, 5, ctx)
    s = pickle.loads(pickle.dumps(c.state_dict()))
    d = SGPO()
    d.load_state_dict(s)
    drive(d.setup(ctx), eng, ctx)  # resumed: must not profile again
    assert ctx.ledger.count_rollouts("profile") == 20 * 4 and len(eng.submitted) == 1
    assert [p.id for p in d.select(ctx.pool, 5, ctx)] == [p.id for p in c.select(ctx.pool, 5, ctx)]  # no wrap
    assert np.array_equal(d.p0, c.p0) and np.array_equal(d.kept, c.kept)
