"""DUET (count half): informativeness from PromptHistory and the count rule."""
import numpy as np
import pytest

from rollwise.control.base import Planner
from rollwise.control.duet import DUET, allocate_counts, informativeness
from rollwise.core.types import Group

from fakes import R, make_ctx


def test_informativeness_shrinkage_and_age():
    u = informativeness([0, 8, 8, 8], [0, 8, 4, 8], [-1, 0, 0, 60], 1.0, 1.0, 0.99)
    assert u[0] == pytest.approx(0.25)  # unseen: prior mean 1/2
    assert u[1] == pytest.approx(0.9 * 0.1)  # 8/8 just now: p = 9/10
    assert u[2] == pytest.approx(0.25)  # 4/8: p = 1/2
    w = 0.99 ** 60
    p = (8 * w + 1) / (8 * w + 2)
    assert u[3] == pytest.approx(p * (1 - p)) and u[3] > u[1]  # old evidence fades


def test_count_rule_hand_computed():
    u = np.array([0.25, 0.25, 0.09, 0.16])
    # u_zero .1 drops prompt 2; 32 * [.25, .25, .16] / .66 = [12.1, 12.1, 7.8] -> [12, 12, 8]
    assert allocate_counts(u, 32, 2, 16, 0.1).tolist() == [12, 12, 0, 8]
    assert allocate_counts(u, 32, 2, 10, 0.1).tolist() == [10, 10, 0, 8]  # n_max clip
    assert allocate_counts(np.array([0.05, 0.01]), 16, 2, 16, 0.1).tolist() == [0, 0]


def test_allocate_reads_history_and_planner_drops_zero():
    ctx = make_ctx(pool_size=4, B=4)
    # step 0: prompt 0 all right, 1 all wrong, 2 half; prompt 3 never seen
    groups = [Group(ctx.pool[0], [R(0, 1)] * 8), Group(ctx.pool[1], [R(1, 0)] * 8),
              Group(ctx.pool[2], [R(2, i % 2) for i in range(8)])]
    ctx.history.record(groups, step=0)
    ctx.step = 1
    c = DUET()
    ns = c.allocate(ctx.pool, [8] * 4, ctx)
    # u = [.099, .099, .25, .25] (one step old, w = .99): 0 and 1 fall under u_zero = .1
    assert ns == [0, 0, 16, 16]
    assert ctx.metrics["duet/skipped"] == 2
    planner = Planner([DUET()], 4, np.random.default_rng(0))
    reqs = next(planner.plan(ctx))  # the step's first requests
    assert sorted((q.prompt.id, q.n) for q in reqs) == [(2, 16), (3, 16)]


def test_budget_follows_incoming_ns_and_state_is_empty():
    ctx = make_ctx(pool_size=6)
    c = DUET(n_min=1)
    assert sum(c.allocate(ctx.pool[:4], [4] * 4, ctx)) == 16  # unseen: equal shares of 16
    assert c.state_dict() == {}
