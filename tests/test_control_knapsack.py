"""Knapsack-RL (control/knapsack.py): the value function, a knapsack on 4 prompts solved by hand, the
fallback to hard prompts, the allocate hook over the prompt history, one-line refusals, and
`knapsack+duet-abort` through the real driver with the scripted token engine."""
import numpy as np
import pytest

from rollwise.control.base import build_planner
from rollwise.control.knapsack import KnapsackRL, allocate_knapsack, needed, solve, value
from rollwise.core.types import Group

from fakes import R, TokenEngine, make_ctx, run_step


def test_value_is_nonzero_gradient_chance_times_info_gain():
    # p = 1/2, n = 2: (1 - 1/4 - 1/4) * 1/2 * 1/4 = 1/16; p = 1/4, n = 3: (1 - 1/64 - 27/64) * 1/4 * 9/16
    assert value(2, 0.5) == pytest.approx(1 / 16)
    assert value(3, 0.25) == pytest.approx((36 / 64) * (9 / 64))
    assert value(8, 0.0) == 0.0 and value(8, 1.0) == 0.0  # saturated or hopeless: worth nothing
    assert needed(0.5, 0.9) == pytest.approx(np.log(0.1) / np.log(0.5))  # 3.32 rollouts


def test_knapsack_on_four_prompts_by_hand():
    """p = (.5, .25, .75, 1), n = 4 each: budget 16, n_min 2, n_max 8, no fallback. The saturated prompt
    keeps 2; the other three start at 2 and share the 8 left. Value is concave in n, so the optimum takes
    the 8 largest marginal gains v(p) * (P(n+1) - P(n)), v = p(1-p)^2, P(n) = 1 - p^n - (1-p)^n:
      p=.5  (v=.125):    2->3 .03125  3->4 .015625 4->5 .0078125 | 5->6 .0039
      p=.25 (v=.140625): 2->3 .02637  3->4 .01648  4->5 .01154  5->6 .00845 | 6->7 .00628
      p=.75 (v=.046875): 2->3 .00879 | 3->4 .00549
    The 8th gain taken is .0078125 and the best left is .00628: n = (5, 6, 3, 2)."""
    p, ns = np.array([0.5, 0.25, 0.75, 1.0]), np.full(4, 4)
    out = allocate_knapsack(p, ns, n_min=2, n_max=8, alpha=0.9, fallback=False)
    assert out.tolist() == [5, 6, 3, 2] and out.sum() == 16
    # the DP agrees with brute force over every split of the 8 extra rollouts
    best = max(((a, b, 8 - a - b) for a in range(7) for b in range(7) if 0 <= 8 - a - b <= 6),
               key=lambda k: sum(value(2 + x, q) for x, q in zip(k, p[:3])))
    assert solve(p[:3], 2, 8, 8).tolist() == list(best) == [3, 4, 1]
    # n_max caps an item: at n_max = 4 every effective prompt takes 2 extra and 2 rollouts are left for
    # no one but the saturated prompt (nobody has p = 0)
    assert allocate_knapsack(p, ns, 2, 4, 0.9, False).tolist() == [4, 4, 4, 4]


def test_fallback_moves_the_surplus_to_hard_prompts():
    """p = (.5, 0, unseen, 1), n = 8 each (budget 32): the unseen prompt keeps 8, the others start at 2;
    18 left. p = .5 needs int(log .1 / log .5) = 3 rollouts for a non-zero gradient with prob .9, one more
    than n_min: the other 17 go to the p = 0 prompt (2 + 17 = 19), and the knapsack gives p = .5 its one."""
    p = np.array([0.5, 0.0, np.nan, 1.0])
    out = allocate_knapsack(p, np.full(4, 8), n_min=2, n_max=32, alpha=0.9, fallback=True)
    assert out.tolist() == [3, 19, 8, 2]
    # without the fallback the knapsack gives all 18 to p = .5 (its value still grows with n)
    assert allocate_knapsack(p, np.full(4, 8), 2, 32, 0.9, False).tolist() == [20, 2, 8, 2]
    # ... unless n_max caps it: the 12 it cannot take go to the p = 0 prompt
    assert allocate_knapsack(p, np.full(4, 8), 2, 8, 0.9, False).tolist() == [8, 14, 8, 2]
    # two hard prompts share the surplus, the larger share first
    out = allocate_knapsack(np.array([0.0, 0.0, 1.0]), np.full(3, 4), 2, 32, 0.9, True)
    assert out.tolist() == [5, 5, 2]


def test_allocate_reads_last_pass_rates_from_the_history():
    ctx = make_ctx(pool_size=4, B=4, n=4)
    for pid, wins in [(0, [1, 0]), (1, [1, 0, 0, 0]), (2, [1, 1, 1, 0]), (3, [1, 1])]:
        ctx.history.record([Group(ctx.pool[pid], [R(pid, w) for w in wins])], step=0)
    c = KnapsackRL(n_min=2, n_max=8, fallback=False)
    assert c.allocate(ctx.pool, [4] * 4, ctx) == [5, 6, 3, 2]
    assert ctx.metrics["knapsack/max_n"] == 6.0


def test_refusals_are_one_line():
    for kw, msg in [({"n_min": 0}, "1 <= n_min <= n_max"), ({"n_min": 5, "n_max": 4}, "1 <= n_min <= n_max"),
                    ({"alpha": 1.0}, "alpha must lie")]:
        with pytest.raises(ValueError, match=msg) as e:
            KnapsackRL(**kw)
        assert "\n" not in str(e.value) and str(e.value).startswith("knapsack")
    ctx = make_ctx()
    ctx.history = None
    with pytest.raises(ValueError, match="knapsack needs the prompt history"):
        KnapsackRL().allocate(ctx.pool[:2], [4, 4], ctx)


def test_knapsack_with_duet_abort_runs_and_the_ledger_balances():
    """`knapsack+duet-abort`, 4 steps over 8 prompts (pass rates 0..1) with the token engine: from the
    second visit on the groups differ in size, the step's rollouts stay B x n, and every decoded token is
    settled once (trained, discarded or pruned)."""
    rates = {i: [0.0, 1.0, 0.5, 0.25, 0.75, 0.5, 1.0, 0.0][i] for i in range(8)}
    ctx = make_ctx(pool_size=8, B=8, n=4)
    eng = TokenEngine(lambda pid, j: 3 + (2 * pid + 3 * j) % 9, rates=rates)
    planner = build_planner("knapsack+duet-abort", 8, ctx.rng, {"duet-abort": {"h_abort": 3, "grace": 2, "q": 0.5}})
    sizes = []
    for step in range(4):
        ctx.step = step
        before = len(eng.submitted)
        run_step(planner, ctx, eng, advance_version=True)
        asked = [q.n for sub in eng.submitted[before:] for q in sub]
        assert sum(asked) == 8 * 4  # the budget: B x n rollouts asked for
        sizes.append(sorted(asked))
    assert sizes[0] == [4] * 8 and len(set(sizes[-1])) > 1  # uniform until the history has pass rates
    led = ctx.ledger
    assert led.count(fate="open") == 0 and led.count() == eng.decoded
    assert led.count(fate="trained") + led.count(fate="discarded") + led.count(fate="pruned") == eng.decoded
    assert led.count_rollouts(fate="pruned") > 0
