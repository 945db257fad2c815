"""PVPO planner half: reference pre-sampling, data filter, V(x) handed to the groups, state."""
import math
import pickle

import numpy as np
import torch

from rollwise.control.base import Planner
from rollwise.control.pvpo import PVPO
from rollwise.core.types import Group

from fakes import R, make_sampled_ctx


def test_setup_presamples_and_filters():
    rates = {0: 1.0, 1: 0.5, 2: 0.0, 3: 0.25}
    ctx, eng = make_sampled_ctx(rates)
    c = PVPO(ref_k=8)
    c.setup(ctx)
    assert ctx.ledger.rollouts["profile"] == 4 * 8 and ctx.ledger.rollouts["train"] == 0
    assert c.ref_pass_rate([0, 1, 2, 3]).tolist() == [1.0, 0.5, 0.0, 0.25]
    assert [p.id for p in c.select(ctx.pool, 4, ctx)] == [1, 2, 3]  # acc = 1 dropped, acc = 0 kept
    drop0 = PVPO(zero_acc="drop")
    drop0.load_state_dict(c.state_dict())
    assert [p.id for p in drop0.select(ctx.pool, 4, ctx)] == [1, 3]


def test_groups_carry_the_anchor_to_the_learner():
    rates = {0: 1.0, 1: 0.5, 2: 0.0, 3: 0.25}
    ctx, eng = make_sampled_ctx(rates, B=3)
    planner = Planner([PVPO(ref_k=4)], 4, np.random.default_rng(0))
    reqs = planner.start(ctx)
    assert sorted(q.prompt.id for q in reqs) == [1, 2, 3]  # setup ran, solved prompt 0 filtered
    for g in eng(reqs):
        ctx.groups[g.prompt.id] = g
    batch, _ = planner.assemble(ctx)
    vals = {g.prompt.id: g.ref_pass_rate for g in batch.groups}
    assert vals == {1: 0.5, 2: 0.0, 3: 0.25}
    ref_G = torch.tensor([getattr(g, "ref_pass_rate", math.nan) for g in batch.groups])
    assert ref_G.shape == (3,)  # how the learner builds AdvInput.ref_pass_rate_G


def test_lazy_profiling_and_refresh():
    rates = {0: 0.5, 1: 1.0, 2: 0.25}
    ctx, eng = make_sampled_ctx(rates)
    c = PVPO(ref_k=4, lazy=True, refresh_every=10)
    c.setup(ctx)
    assert ctx.ledger.rollouts["profile"] == 0  # lazy: nothing up front
    assert [p.id for p in c.select(ctx.pool[:2], 2, ctx)] == [0]
    assert ctx.ledger.rollouts["profile"] == 8 and math.isnan(c.ref_rate[2])
    ctx.step = 5
    c.select(ctx.pool[:2], 2, ctx)
    assert ctx.ledger.rollouts["profile"] == 8  # fresh enough
    eng.rates[1] = 0.5  # the policy changed; V refreshes once it is 10 steps old
    ctx.step = 10
    assert [p.id for p in c.select(ctx.pool[:2], 2, ctx)] == [0, 1]
    assert ctx.ledger.rollouts["profile"] == 16 and c.ref_step[1] == 10
    # a group whose prompt never went through select (another selector added it) is profiled in finish
    g = Group(ctx.pool[2], [R(2, 1)])
    c.finish([g], ctx)
    assert g.ref_pass_rate == 0.25 and ctx.ledger.rollouts["profile"] == 20


def test_state_dict_round_trip():
    ctx, _ = make_sampled_ctx({0: 0.5, 1: 1.0, 2: 0.0})
    c = PVPO()
    c.setup(ctx)
    s = pickle.loads(pickle.dumps(c.state_dict()))
    d = PVPO()
    d.load_state_dict(s)
    d.setup(ctx)  # resumed: must not sample again
    assert ctx.ledger.rollouts["profile"] == 3 * 8
    assert np.array_equal(d.ref_rate, c.ref_rate) and np.array_equal(d.ref_step, c.ref_step)
