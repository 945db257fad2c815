"""PVPO planner half: reference pre-sampling, data filter, V(x) handed to the groups, state."""
import math
import pickle

import numpy as np

from rollwise.control.base import Planner
from rollwise.control.pvpo import PVPO
from rollwise.core.types import Group
from rollwise.learn.advantages import batch_input

from fakes import R, drive, make_sampled_ctx, run_step


def test_setup_presamples_and_filters():
    rates = {0: 1.0, 1: 0.5, 2: 0.0, 3: 0.25}
    ctx, eng = make_sampled_ctx(rates)
    c = PVPO(ref_k=8)
    c.bind(len(ctx.pool))
    drive(c.setup(ctx), eng, ctx)
    assert ctx.ledger.count_rollouts("profile") == 4 * 8 and ctx.ledger.count_rollouts("train") == 0
    assert c.ref_pass_rate([0, 1, 2, 3]).tolist() == [1.0, 0.5, 0.0, 0.25]
    assert [p.id for p in drive(c.select(ctx.pool, 4, ctx), eng, ctx)] == [1, 2, 3]  # acc = 1 dropped, acc = 0 kept
    drop0 = PVPO(zero_acc="drop")
    drop0.bind(len(ctx.pool))
    drop0.load_state_dict(c.state_dict())
    assert [p.id for p in drive(drop0.select(ctx.pool, 4, ctx), eng, ctx)] == [1, 3]
    assert len(eng.submitted) == 1  # the filter reads V: no more samples


def test_groups_carry_the_anchor_to_the_learner():
    rates = {0: 1.0, 1: 0.5, 2: 0.0, 3: 0.25}
    ctx, eng = make_sampled_ctx(rates, B=3)
    planner = Planner([PVPO(ref_k=4)], 4, np.random.default_rng(0))
    batch, _, rounds = run_step(planner, ctx, eng)
    assert [q.purpose for q in eng.submitted[0]] == ["profile"] * 4  # setup ran first
    assert len(rounds) == 1 and sorted(rounds[0]) == [1, 2, 3]  # solved prompt 0 filtered
    vals = {g.prompt.id: g.meta["ref_pass_rate"] for g in batch.groups}
    assert vals == {1: 0.5, 2: 0.0, 3: 0.25}
    ref_G = batch_input(batch).ref_pass_rate_G  # how the learner builds AdvInput.ref_pass_rate_G
    assert ref_G.shape == (3,)
    assert ref_G.tolist() == [vals[g.prompt.id] for g in batch.groups]


def test_lazy_profiling_and_refresh():
    rates = {0: 0.5, 1: 1.0, 2: 0.25}
    ctx, eng = make_sampled_ctx(rates)
    c = PVPO(ref_k=4, lazy=True, refresh_every=10)
    c.bind(len(ctx.pool))
    drive(c.setup(ctx), eng, ctx)
    assert ctx.ledger.count_rollouts("profile") == 0 and eng.submitted == []  # lazy: nothing up front
    assert [p.id for p in drive(c.select(ctx.pool[:2], 2, ctx), eng, ctx)] == [0]
    assert ctx.ledger.count_rollouts("profile") == 8 and math.isnan(c.ref_rate[2])
    ctx.step = 5
    drive(c.select(ctx.pool[:2], 2, ctx), eng, ctx)
    assert ctx.ledger.count_rollouts("profile") == 8  # fresh enough
    eng.rates[1] = 0.5  # the policy changed; V refreshes once it is 10 steps old
    ctx.step = 10
    assert [p.id for p in drive(c.select(ctx.pool[:2], 2, ctx), eng, ctx)] == [0, 1]
    assert ctx.ledger.count_rollouts("profile") == 16 and c.ref_step[1] == 10
    # a group whose prompt never went through select (another selector added it) is profiled in finish
    g = Group(ctx.pool[2], [R(2, 1)])
    drive(c.finish([g], ctx), eng, ctx)
    assert g.meta["ref_pass_rate"] == 0.25 and ctx.ledger.count_rollouts("profile") == 20


def test_state_dict_round_trip():
    ctx, eng = make_sampled_ctx({0: 0.5, 1: 1.0, 2: 0.0})
    c = PVPO()
    c.bind(len(ctx.pool))
    drive(c.setup(ctx), eng, ctx)
    s = pickle.loads(pickle.dumps(c.state_dict()))
    d = PVPO()
    d.bind(len(ctx.pool))
    d.load_state_dict(s)
    drive(d.setup(ctx), eng, ctx)  # resumed: must not sample again
    assert ctx.ledger.count_rollouts("profile") == 3 * 8 and len(eng.submitted) == 1
    assert np.array_equal(d.ref_rate, c.ref_rate) and np.array_equal(d.ref_step, c.ref_step)
