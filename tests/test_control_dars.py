"""DARS: the ET / HW extra-rollout formulas (hand-computed), the two-stage step, the filter."""
import pickle

import numpy as np
import pytest

from rollwise.control.base import Planner
from rollwise.control.dars import DARS, DARSHW, schedule_et, schedule_hw

from fakes import Engine, make_ctx, run_step


def test_et_hand_computed():
    # a = 1/8, N = 8: S = 2a(1-a) = 7/32, A_peak = 4, (4 - 8*7/32) / (7/32) = 10.29 -> 11
    assert schedule_et(1 / 8, 8, 32) == 11
    # closed form N(1-2a)^2 / (4a(1-a)) at a = 1/4: 8 * 0.25 / 0.75 = 2.67 -> 3
    assert schedule_et(0.25, 8, 32) == 3
    # a = 0 -> a = 0.5/N = 1/16: 26.13 -> 27, capped at N_max - N = 24
    assert schedule_et(0.0, 8, 32) == 24
    assert schedule_et(0.0, 8, 100) == 27
    assert schedule_et(0.5, 8, 32) == 0 and schedule_et(0.75, 8, 32) == 0
    # with std normalisation: S = 2 sqrt(a(1-a)) = 0.866, A_peak = N = 8: (8 - 6.93)/0.866 = 1.24 -> 2
    assert schedule_et(0.25, 8, 32, std=True) == 2


def test_hw_hand_computed():
    # closed form N(1-2a)/(2a): a = 1/8 -> 8 * 0.75 / 0.25 = 24; a = 1/4 -> 8 * 0.5 / 0.5 = 8
    assert schedule_hw(1 / 8, 8, 64) == 24
    assert schedule_hw(0.25, 8, 64) == 8
    # a = 0 -> 1/16: 8 * (7/8) / (1/8) = 56 = N_max - N
    assert schedule_hw(0.0, 8, 64) == 56
    assert schedule_hw(0.0, 8, 40) == 32
    assert schedule_hw(0.5, 8, 64) == 0
    # HW gives hard prompts more than ET at every a < 1/2
    for a in (1 / 8, 2 / 8, 3 / 8):
        assert schedule_hw(a, 8, 1000) >= schedule_et(a, 8, 1000)


def test_default_n_max_scales_with_stage1_size():
    assert DARS().extra(0.0, 8) == 24 and DARSHW().extra(0.0, 8) == 56
    assert DARS(n_max=10).extra(0.0, 8) == 2
    assert DARS().extra(0.0, 4) == schedule_et(0.0, 4, 16)


def test_two_stage_step_and_filter():
    ctx = make_ctx(pool_size=4, B=4)
    rates = {0: 1 / 8, 1: 0.5, 2: 0.0, 3: 1.0}
    planner = Planner([DARS()], 4, np.random.default_rng(1))
    batch, rejected, sizes = run_step(planner, ctx, Engine(rates), reset_metrics=False)
    assert sizes[0] == {0: 8, 1: 8, 2: 8, 3: 8}
    assert sizes[1] == {0: 11, 2: 24}  # stage 2 only for accuracy < 0.5
    assert len(sizes) == 2  # no third stage
    assert ctx.groups[0].n == 19 and ctx.groups[2].n == 32 and ctx.groups[1].n == 8
    kept = {g.prompt.id for g in batch.groups}
    assert kept == {0, 1}  # combined accuracy 0 (prompt 2) and 1 (prompt 3) do not train
    assert {g.prompt.id for g in rejected} == {2, 3}
    assert ctx.ledger.count_rollouts("train") == 8 * 4 + 11 + 24
    # settled by the driver: prompts 0 (19) and 1 (8) trained, the rejected 2 (32) and 3 (8) discarded
    assert ctx.ledger.count_rollouts("train", "trained") == 19 + 8
    assert ctx.ledger.count_rollouts("train", "discarded") == 32 + 8
    assert ctx.metrics["dars/2nd_rollout"] == 35


def test_hw_variant_and_next_step_resets():
    ctx = make_ctx(pool_size=2, B=2)
    planner = Planner([DARSHW()], 2, np.random.default_rng(1))
    eng = Engine({0: 0.25, 1: 0.75})
    _, _, sizes = run_step(planner, ctx, eng, reset_metrics=False)
    assert sizes[1] == {0: 8}
    ctx.step = 1
    _, _, sizes = run_step(planner, ctx, eng, reset_metrics=False)
    assert sizes[0] == {0: 8, 1: 8} and 0 in sizes[1]


def test_state_dict_round_trip():
    c = DARS()
    ctx = make_ctx()
    c.allocate(ctx.pool[:3], [8, 8, 8], ctx)
    s = pickle.loads(pickle.dumps(c.state_dict()))
    d = DARS()
    d.load_state_dict(s)
    assert d.state_dict() == c.state_dict()
    with pytest.raises(ValueError):
        DARS(mode="xx")
