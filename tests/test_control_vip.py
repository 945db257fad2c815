"""VIP (control/vip.py): the variance-minimising allocation on 4 prompts by hand (Neyman's n_i ~ sqrt(p(1-p))),
the bounds, the Gaussian-process prediction by hand, the history it reads, and `vip+duet-abort` through the
Trainer on the tiny model."""
import math

import numpy as np
import pytest

from rollwise.control.base import build_planner
from rollwise.control.vip import VIP, allocate_variance, gp_success, round_keeping_sum

from fakes import make_ctx


def test_allocation_on_four_prompts_by_hand():
    """p = .5, .5, .1, .9: sqrt(p(1-p)) = .5, .5, .3, .3 (sum 1.6), so 32 rollouts split 32 x (.5, .5, .3, .3)
    / 1.6 = 10, 10, 6, 6 (uniform would give 8 each: sum v/n = 2 x .25/8 + 2 x .09/8 = .085 against
    2 x .25/10 + 2 x .09/6 = .08)."""
    n = allocate_variance(np.array([0.5, 0.5, 0.1, 0.9]), 32, 2, 32)
    assert n.tolist() == [10, 10, 6, 6]
    v = np.array([0.25, 0.25, 0.09, 0.09])
    assert np.sum(v / n) == pytest.approx(0.08) and np.sum(v / 8) == pytest.approx(0.085)


def test_saturated_prompts_get_n_min_and_the_bounds_hold():
    # p = 0 and 1 carry no variance: n_min each; the rest of 16 splits evenly between the two p = .5 prompts
    assert allocate_variance(np.array([0.5, 0.0, 1.0, 0.5]), 16, 2, 16).tolist() == [6, 2, 2, 6]
    # n_max binds: (.5, .5) would take 3/4 of 20 -> 7.5 each; at most 6, the other two share the rest: 4, 4
    assert allocate_variance(np.array([0.5, 0.5, 0.1, 0.1]), 20, 2, 6).tolist() == [6, 6, 4, 4]
    # rounding keeps the sum: 3 x 10/3 -> floors 3, 3, 3, then +1 to the first largest remainder
    assert round_keeping_sum(np.array([10 / 3] * 3), 10, 1, 10).tolist() == [4, 3, 3]


def test_gaussian_process_prediction_by_hand():
    """One visit (3 of 4 right) at step 0, prior .5, s2 = .05, length scale 4. Noise: q = 4/6,
    (q(1-q) + .001)/4 = .0558; at step 0 the mean is .5 + .05 / (.05 + .0558) x .25; four steps later the
    covariance is .05 e^-0.5."""
    noise = (4 / 6 * 2 / 6 + 1e-3) / 4
    assert gp_success([0], [3], [4], 0, 0.5, 0.05, 4.0) == pytest.approx(0.5 + 0.05 / (0.05 + noise) * 0.25)
    assert gp_success([0], [3], [4], 4, 0.5, 0.05, 4.0) == pytest.approx(
        0.5 + 0.05 * math.exp(-0.5) / (0.05 + noise) * 0.25)
    assert gp_success([], [], [], 3, 0.3, 0.05, 4.0) == 0.3  # no visit: the prior
    # more consistent visits pull the mean further toward their rate; the result stays a probability
    assert gp_success([0, 1, 2], [8, 8, 8], [8, 8, 8], 3, 0.2, 0.05, 4.0) > gp_success([2], [8], [8], 3, 0.2, 0.05, 4.0)
    assert gp_success([0, 1, 2], [8, 8, 8], [8, 8, 8], 3, 0.9, 5.0, 4.0) <= 1.0


def test_vip_reads_the_history_and_allocates_the_budget_it_came_with():
    ctx = make_ctx(pool_size=4, B=4, n=8, step=2)
    # step 1: prompts 0 and 1 visited (4 of 8 right, 8 of 8 right); prompt 2 at step 0; prompt 3 never
    ctx.history.record_arrays(0, prompt=[2], n=[8], correct=[1])
    ctx.history.record_arrays(1, prompt=[0, 1], n=[8, 8], correct=[4, 8])
    vip = VIP()
    p = vip.predict([0, 1, 2, 3], ctx)
    prior = 12 / 16  # the pass rate of every rollout of the last step logged
    assert p[3] == prior and p[1] > prior and p[0] < prior and p[2] < p[0]
    ns = vip.allocate(ctx.pool, [8] * 4, ctx)
    assert sum(ns) == 32 and all(2 <= k <= 32 for k in ns)
    assert ns == allocate_variance(p, 32, 2, 32).tolist()
    assert ctx.metrics["vip/max_n"] == max(ns) and ctx.metrics["vip/min_n"] == min(ns)
    ctx.history = None
    with pytest.raises(ValueError, match="vip needs the prompt history"):
        vip.allocate(ctx.pool, [8] * 4, ctx)


def test_bad_options_fail_clearly():
    for kw in ({"n_min": 0}, {"n_min": 4, "n_max": 2}, {"window": 0}, {"length_scale": 0}, {"s2": -1}):
        with pytest.raises(ValueError, match="vip: need"):
            VIP(**kw)
    build_planner("greso+vip+dapo", 4, np.random.default_rng(0))


def test_trainer_runs_vip_with_duet_abort_on_the_tiny_model(tmp_path):
    """Two steps of `vip+duet-abort` through the Trainer: step 2 allocates from step 1's history (its n
    differ from the uniform 4 unless every prediction is equal) and the step's rollouts stay B x n."""
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    # the shipped arithmetic base on a pool of 8 prompts (each comes back in step 2 with a pass rate)
    cfg = load_config(None, {"out": str(tmp_path / "vip"), "steps": 2, "eval_every": 0, "batch_size": 8, "n": 4,
                             "task_options": {"pool_size": 8}, "planner": "vip+duet-abort"})
    tr = Trainer(cfg)
    rows = tr.run()
    assert [r["step"] for r in rows] == [1, 2]
    assert all("vip/max_n" in r for r in rows)
    assert rows[1]["vip/max_n"] > rows[1]["vip/min_n"]
    assert tr.ledger.count(fate="open") == 0
    assert tr.ledger.budget_rollouts() == 2 * 8 * 4
