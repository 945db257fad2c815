"""E3: rank-based counts (with and without the n_max cap), epoch-end ranks and ranges, the
entropy-targeting temperature (reported, and applied to the step's requests), state."""
import functools
import math
import pickle

import numpy as np
import pytest

from rollwise.control.base import Planner
from rollwise.control.e3 import E3, TemperatureScheduler, epoch_ranks, rollout_counts
from rollwise.core.types import Batch, Group

import fakes
from fakes import make_ctx

R = functools.partial(fakes.R, entropy=1.0, ntok=4)


def test_counts_epoch_one_is_uniform():
    assert rollout_counts(np.full(4, -1.0), 32, 8, 8).tolist() == [8, 8, 8, 8]


def test_counts_hand_computed():
    # n_min 4, n_max 12, budget 32: extra 16 * rank/sum = 16 * [0, 1/6, 1/3, 1/2] -> floor [4, 6, 9, 12]
    # (sum 31); the leftover 1 goes to the highest rank below n_max (index 2) -> [4, 6, 10, 12]
    assert rollout_counts(np.array([0.0, 0.25, 0.5, 0.75]), 32, 4, 12).tolist() == [4, 6, 10, 12]


def test_release_leaves_counts_uncapped_fix_caps_them():
    rank = np.array([0.0, 0.0, 0.0, 0.9])
    # release: 4 + 16 * .9/(.9 + 1e-8) = 19.99.. -> 19 > n_max (the bug); leftover 1 -> index 0
    assert rollout_counts(rank, 32, 4, 12, cap=False).tolist() == [5, 4, 4, 19]
    fixed = rollout_counts(rank, 32, 4, 12)
    assert fixed.max() <= 12 and fixed.sum() == 32 and fixed.tolist() == [12, 4, 4, 12]


def test_epoch_ranks_sorted_by_mean_reward_desc():
    # means [1, 0, .5, never sampled -> 0]: order 0, 2, 1, 3 (ties keep id order)
    r = epoch_ranks(np.array([8.0, 0.0, 4.0, 0.0]), np.array([8, 8, 8, 0]))
    assert r.tolist() == [0.0, 0.5, 0.25, 0.75]


def test_temperature_update_and_annealing():
    ts = TemperatureScheduler(t0=1.0, init_steps=1, max_steps=10, annealing=True)
    ts.step(2.0, 100)  # step 1 only records H* = 2
    assert ts.t == 1.0 and ts.target is None
    ts.step(1.0, 100)  # entropy fell: raise T
    factor = math.log(100) + math.log(math.log(100))
    assert ts.t == pytest.approx(1.0 * (1 + 1.0 * math.log(2.0) / factor))
    t = ts.t
    ts.step(2.0, 100)  # on target: unchanged
    assert ts.t == pytest.approx(t)
    while ts.steps <= 10:
        ts.step(2.0, 100)
    assert ts.target == pytest.approx(0.9 * 2.0)  # cosine-annealed to 0.9 H0 at max_steps
    ts2 = TemperatureScheduler(max_steps=10)
    for h in (2.0, 2.0, 2.0, 2.0, 2.0, 2.0):  # steps 1..6: annealing starts at step 6 (10 - 4)
        ts2.step(h, 100)
    assert ts2.target == pytest.approx(2.0)  # prog 0 -> factor 1


def test_component_epochs_allocation_and_metrics():
    ctx = make_ctx(pool_size=8, B=4)
    c = E3(epoch_steps=2, vocab_size=50)
    c.bind(len(ctx.pool))
    c.begin_step(ctx)
    assert c.allocate(ctx.pool[:4], [8] * 4, ctx) == [8, 8, 8, 8]
    rates = [1.0, 0.875, 0.75, 0.5, 0.25, 0.125, 0.0, 0.0]
    for step in range(2):
        groups = [Group(ctx.pool[i], [R(i, j < rates[i] * 8) for j in range(8)]) for i in range(8)]
        ctx.step = step
        c.begin_step(ctx)
        c.observe(groups, Batch(groups), ctx)
        assert "e3/temperature" in ctx.metrics
    assert (c.n_min, c.n_max, c.epoch) == (6, 10, 1)
    assert c.rank.tolist() == [i / 8 for i in range(8)]
    ns = c.allocate([ctx.pool[0], ctx.pool[3], ctx.pool[7]], [8] * 3, ctx)
    assert ns[0] == 6 and ns[2] == 10 and sum(ns) == 24  # easiest n_min, hardest n_max
    c.rank[:] = 0.0
    c.rank[5] = 0.9  # rank mass on one prompt: the release would give it 20 > n_max = 10
    ns = c.allocate(ctx.pool[:4] + [ctx.pool[5]], [8] * 5, ctx)
    assert max(ns) == 10 and sum(ns) == 40
    for _ in range(4):
        c.observe([], Batch([]), ctx)
    assert (c.n_min, c.n_max) == (4, 12)  # clamped to [n_low, n_high]


def test_temperature_reported_from_batch_entropy():
    ctx = make_ctx()
    c = E3(vocab_size=50)
    planner = Planner([c], len(ctx.pool), np.random.default_rng(0))
    reqs = next(planner.plan(ctx))  # step 0: the temperature starts at t0 = 1 and is applied
    assert reqs and all(r.sampling.temperature == c.temp.t == 1.0 for r in reqs)
    g1 = [Group(ctx.pool[0], [R(0, 1, entropy=2.0)])]
    c.observe(g1, Batch(g1), ctx)
    g2 = [Group(ctx.pool[0], [R(0, 1, entropy=1.0, ntok=2), R(0, 0, entropy=1.0, ntok=2)])]
    c.observe(g2, Batch(g2), ctx)
    assert ctx.metrics["e3/entropy"] == pytest.approx(1.0)
    factor = math.log(50) + math.log(math.log(50))
    assert ctx.metrics["e3/temperature"] == pytest.approx(1 + math.log(2.0) / factor)
    assert ctx.metrics["e3/target_entropy"] == pytest.approx(2.0)
    # the next step's requests carry the new temperature
    ctx.step, ctx.groups = 1, {}
    reqs = next(planner.plan(ctx))
    assert reqs and all(r.sampling.temperature == pytest.approx(1 + math.log(2.0) / factor) for r in reqs)
    assert all(r.sampling.temperature == c.temp.t for r in reqs)
    # set_temperature=False only reports it: the requests keep the engine's default
    quiet = E3(vocab_size=50, set_temperature=False)
    quiet.temp.load_state_dict(c.temp.state_dict())
    reqs = next(Planner([quiet], len(ctx.pool), np.random.default_rng(0)).plan(ctx))
    assert reqs and all(r.sampling.temperature is None for r in reqs)


def test_state_dict_round_trip():
    ctx = make_ctx()
    c = E3(epoch_steps=1, vocab_size=50)
    c.bind(len(ctx.pool))
    groups = [Group(ctx.pool[i], [R(i, i % 2)]) for i in range(4)]
    for step in range(2):
        ctx.step = step
        c.begin_step(ctx)
        c.observe(groups, Batch(groups), ctx)
    s = pickle.loads(pickle.dumps(c.state_dict()))
    d = E3(epoch_steps=1, vocab_size=50)
    d.load_state_dict(s)
    assert d.allocate(ctx.pool[:4], [8] * 4, ctx) == c.allocate(ctx.pool[:4], [8] * 4, ctx)
    assert d.temp.state_dict() == c.temp.state_dict() and (d.n_min, d.n_max) == (c.n_min, c.n_max)
