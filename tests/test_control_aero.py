"""AERO: Beta tail probabilities, discounted posterior, staged extension, max-variance rejection."""
import pickle

import numpy as np
import pytest

from rollwise.control.aero import AERO, betainc, informative_prob
from rollwise.control.base import Planner
from rollwise.core.types import Batch, Group
from rollwise.control.base import Assembled
from rollwise.run.driver import StepDriver

from fakes import Engine, R, make_ctx, run_step


def settle(ledger, generated, trained):
    """Charge `generated` groups and settle fates as the step driver does once the batch is `trained`."""
    ledger.charge(generated)
    driver = StepDriver(None, ledger, None)
    driver._generated = list(generated)
    driver.settle(Assembled(Batch(trained), [], list(generated)), None)


def test_incomplete_beta_closed_forms():
    for b in (1, 3, 9, 40):
        for x in (0.05, 0.3, 0.9):
            assert betainc(1, b, x) == pytest.approx(1 - (1 - x) ** b, abs=1e-10)  # Beta(1, b)
            assert betainc(b, 1, x) == pytest.approx(x ** b, abs=1e-10)  # Beta(b, 1)
    assert betainc(2, 2, 0.5) == pytest.approx(0.5, abs=1e-12)
    # I_0.4(2, 3) = sum_{j=2..4} C(4,j) .4^j .6^(4-j) = 0.3456 + 0.1536 + 0.0256
    assert betainc(2, 3, 0.4) == pytest.approx(0.5248, abs=1e-10)
    assert betainc(2.5, 7.25, 0.0) == 0.0 and betainc(2.5, 7.25, 1.0) == 1.0
    # P(p in [.05, .95]) under Beta(1, 9) = .95^9 - .05^9
    assert informative_prob(1, 9, 0.05)[0] == pytest.approx(0.95 ** 9 - 0.05 ** 9, abs=1e-10)
    assert informative_prob([1, 1], [1, 1], 0.05) == pytest.approx([0.9, 0.9])


def test_posterior_update_with_lazy_discount():
    c = AERO(decay=0.9)
    c.bind(3)
    a, b = c.posterior([0], 0)
    assert (a[0], b[0]) == (1.0, 1.0)  # prior Beta(1, 1)
    c.update([0], [3], [5], step=0)
    a, b = c.posterior([0], 0)
    assert (a[0], b[0]) == (4.0, 6.0)
    a, b = c.posterior([0], 10)  # evidence fades with the steps since the update
    assert a[0] == pytest.approx(1 + 3 * 0.9 ** 10) and b[0] == pytest.approx(1 + 5 * 0.9 ** 10)
    c.update([0], [1], [0], step=10)  # discounted old evidence + new
    a, b = c.posterior([0], 10)
    assert a[0] == pytest.approx(1 + 3 * 0.9 ** 10 + 1) and b[0] == pytest.approx(1 + 5 * 0.9 ** 10)


def test_select_skips_dead_prompts_until_they_fade():
    ctx = make_ctx(3, B=3)
    c = AERO(eps=0.05, delta=0.1, decay=0.98)
    c.bind(3)
    c.update([1], [0], [60], step=0)  # Beta(1, 61): P(p > .05) = .95^61 = 0.04 < 0.1 -> dead
    assert [p.id for p in c.select(ctx.pool, 3, ctx)] == [0, 2]
    ctx.step = 100  # 61 * .98^100 ~ 8 wrong left: P = .95^9 = 0.63 -> alive again
    assert [p.id for p in c.select(ctx.pool, 3, ctx)] == [0, 1, 2]


def test_more_extends_only_live_zero_variance_groups():
    ctx = make_ctx(4, B=4)
    c = AERO()  # n0 = 8, step 4, n_max 16
    c.bind(4)
    c.update([3], [0], [60], step=0)
    zv = Group(ctx.pool[0], [R(0, 0)] * 8)
    mixed = Group(ctx.pool[1], [R(1, 1)] + [R(1, 0)] * 7)
    full = Group(ctx.pool[2], [R(2, 0)] * 16)
    dead = Group(ctx.pool[3], [R(3, 0)] * 8)
    reqs = c.more([zv, mixed, full, dead], ctx)
    assert [(q.prompt.id, q.n) for q in reqs] == [(0, 4)]
    assert c.more([Group(ctx.pool[0], [R(0, 1)] * 14)], ctx)[0].n == 2  # capped at n_max


def test_finish_rejects_to_max_variance_subset():
    ctx = make_ctx(2, B=2)
    c = AERO()
    rs = [R(0, 1), R(0, 1)] + [R(0, 0) for _ in range(14)]
    big = Group(ctx.pool[0], rs)
    small = Group(ctx.pool[1], [R(1, 1), R(1, 0)])
    out = c.finish([big, small], ctx)
    assert out[1] is small
    g = out[0]
    assert g.n == 8 and g.num_correct == 2  # both correct kept (max variance), 6 wrong
    assert not ctx.ledger.tokens  # components never write the ledger: the driver settles the drops
    settle(ctx.ledger, [big, small], out)
    # (was: rollouts["discarded"] == 8 and rollouts["train"] == 8 with big alone charged; the small
    # group is charged too here, so trained = 8 + 2)
    assert ctx.ledger.count_rollouts("train", "discarded") == 8
    assert ctx.ledger.count_rollouts("train", "trained") == 10
    assert sum(r.fate == "discarded" for r in rs) == 8 and all(r.fate == "trained" for r in g.rollouts)
    assert c._counts[0] == (2, 14)  # the posterior counts every generated response
    c2 = AERO(train_n=4)
    out = c2.finish([Group(ctx.pool[1], [R(1, i < 6) for i in range(8)])], ctx)
    assert sorted(r.correct for r in out[0].rollouts) == [False, False, True, True]


def test_planner_step_end_to_end():
    ctx = make_ctx(3, B=3)
    eng = Engine({0: 1 / 12, 1: 0.5, 2: 0.0})
    c = AERO()
    planner = Planner([c], 3, np.random.default_rng(0))
    batch, rejected, rounds = run_step(planner, ctx, eng)
    assert rounds[0] == {0: 8, 1: 8, 2: 8}
    assert rounds[1] == {0: 4, 2: 4} and rounds[2] == {2: 4}  # 0 gets its success at sample 12
    assert ctx.groups[0].n == 12 and ctx.groups[2].n == 16
    ids = {g.prompt.id: g for g in batch.groups}
    assert set(ids) == {0, 1} and ids[0].n == 8 and ids[0].num_correct == 1
    assert [g.prompt.id for g in rejected] == [2]
    # The driver settles every train rollout of this step that is not in the batch as discarded:
    # the 4 trimmed from group 0 (12 -> 8) and, new in the count, the 16 of the rejected group 2
    # (the old test's run_step left rejected groups to the loop, which also reclassified them).
    assert ctx.ledger.count_rollouts("train", "discarded") == 4 + 16
    assert ctx.ledger.count("train", "discarded") == (4 + 16) * 3  # 3 tokens per fake rollout
    assert ctx.ledger.count_rollouts("train", "trained") == 16
    assert ctx.ledger.legacy_rollouts()["discarded"] == 20 and ctx.ledger.legacy_rollouts()["train"] == 16
    assert sum(r.fate == "discarded" for r in ctx.groups[0].rollouts) == 4
    a, b = c.posterior([0, 2], 0)
    assert (a[0], b[0]) == (2.0, 12.0) and (a[1], b[1]) == (1.0, 17.0)


def test_state_dict_round_trip():
    ctx = make_ctx(5, B=5)
    eng = Engine({0: 0.5, 1: 0.0, 2: 1.0, 3: 0.25, 4: 1 / 16})
    c = AERO()
    planner = Planner([c], 5, np.random.default_rng(0))
    for step in range(2):
        ctx.step = step
        run_step(planner, ctx, eng)
    s = pickle.loads(pickle.dumps(c.state_dict()))
    d = AERO()
    d.load_state_dict(s)
    for k in ("ca", "cb", "t_upd"):
        assert np.array_equal(s[k], d.state_dict()[k])
    assert np.allclose(d.posterior(range(5), 7)[1], c.posterior(range(5), 7)[1])
