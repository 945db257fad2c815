"""PODS (control/pods.py): max-variance down-sampling on hand-computed groups, the ledger counting the
dropped rows as discarded, one-line refusals, and compositions through the real driver (greso+pods,
speed-rl+pods with the fakes; knapsack+pods through the Trainer on the tiny model)."""
import numpy as np
import pytest

from rollwise.control.base import Planner, build_planner
from rollwise.control.pods import PODS
from rollwise.core.types import Group, Rollout

from fakes import R, make_ctx, make_sampled_ctx, run_step


def rewarded(pid, rewards):
    rs = []
    for x in rewards:
        r = R(pid, x >= 1.0)
        r.reward = float(x)
        rs.append(r)
    return rs


def test_max_variance_subset_by_hand():
    """Rewards (0, .2, .5, .9, 1), m = 3: the candidates are the k lowest + (3 - k) highest,
    k = 0: (.5, .9, 1) var .042; k = 1: (0, .9, 1) var .202; k = 2: (0, .2, 1) var .187; k = 3: var .042.
    k = 1 wins."""
    ctx = make_ctx(pool_size=2)
    g = Group(ctx.pool[0], rewarded(0, [0.5, 0.0, 1.0, 0.2, 0.9]))  # shuffled: rows 1, 4, 2 are kept
    (out,) = PODS(m=3).finish([g], ctx)
    assert out is not g and sorted(out.rewards) == [0.0, 0.9, 1.0]
    rows = [id(r) for r in g.rollouts]
    assert [rows.index(id(r)) for r in out.rollouts] == [1, 2, 4]  # the rows themselves, in group order
    assert np.var(out.rewards) == pytest.approx(np.var([0.0, 0.9, 1.0]))
    # 0/1 rewards, 3 right of 8, m = 4: two right, two wrong (variance 1/4, the most four rows can have)
    g = Group(ctx.pool[1], rewarded(1, [1, 0, 0, 1, 0, 0, 1, 0]))
    (out,) = PODS(m=4).finish([g], ctx)
    assert sorted(out.rewards) == [0, 0, 1, 1]
    # one right of 8, m = 4: the one right and three wrong
    (out,) = PODS(m=4).finish([Group(ctx.pool[1], rewarded(1, [0, 0, 0, 0, 0, 1, 0, 0]))], ctx)
    assert sorted(out.rewards) == [0, 0, 0, 1]
    small = Group(ctx.pool[0], rewarded(0, [1, 0]))
    assert PODS(m=4).finish([small], ctx) == [small]  # at most m rows: trained whole


def test_closed_form_matches_brute_force():
    """The extreme-subset closed form reaches the largest variance of any size-m subset (every subset
    searched), for 0/1 and graded rewards with ties."""
    from itertools import combinations

    ctx = make_ctx(pool_size=1)
    rng = np.random.default_rng(0)
    for trial in range(60):
        n = int(rng.integers(3, 9))
        m = int(rng.integers(2, n))
        rewards = rng.choice([0.0, 1.0] if trial % 2 else [0.0, 0.25, 0.5, 0.9, 1.0], size=n).tolist()
        (out,) = PODS(m=m).finish([Group(ctx.pool[0], rewarded(0, rewards))], ctx)
        best = max(np.var([rewards[i] for i in c]) for c in combinations(range(n), m))
        assert out.n == m and np.var(out.rewards) == pytest.approx(best, abs=1e-12), (rewards, m)


def test_dropped_rows_are_discarded_in_the_ledger():
    """One step, B = 3, n = 8, m = 4: 24 rollouts generated, 12 trained, 12 discarded, each once."""
    ctx, eng = make_sampled_ctx({0: 0.5, 1: 0.25, 2: 1.0}, B=3, n=8)
    batch, rejected, rounds = run_step(Planner([PODS(m=4)], 3, np.random.default_rng(0)), ctx, eng)
    assert rounds == [{0: 8, 1: 8, 2: 8}] and not rejected  # generated wide
    assert sorted(g.n for g in batch.groups) == [4, 4, 4]  # trained narrow
    by_id = {g.prompt.id: g for g in batch.groups}
    assert sorted(by_id[0].rewards) == [0, 0, 1, 1] and sorted(by_id[1].rewards) == [0, 0, 1, 1]
    led = ctx.ledger
    assert led.count_rollouts("train") == 24
    assert led.count_rollouts("train", "trained") == 12 and led.count_rollouts("train", "discarded") == 12
    assert led.count("train", "discarded") == 12 * 3 and led.count(fate="open") == 0  # 3 tokens a row
    assert ctx.metrics["pods/dropped"] == 12
    # n set: PODS generates that many itself
    ctx, eng = make_sampled_ctx({0: 0.5, 1: 0.25}, B=2, n=4)
    _, _, rounds = run_step(Planner([PODS(m=4, n=16)], 2, np.random.default_rng(0)), ctx, eng)
    assert rounds == [{0: 16, 1: 16}] and ctx.ledger.count_rollouts("train", "discarded") == 2 * 12


def test_refusals_are_one_line():
    for kw, msg in [({"m": 1}, "m must be >= 2"), ({"m": 4, "n": 3}, "need n >= m >= 2")]:
        with pytest.raises(ValueError, match=msg) as e:
            PODS(**kw)
        assert "\n" not in str(e.value) and str(e.value).startswith("pods:")
    with pytest.raises(ValueError, match="pods.*unknown option|pods.*'k'"):
        build_planner("pods", 4, np.random.default_rng(0), {"pods": {"k": 2}})


def test_greso_with_pods_and_speed_rl_with_pods_run_steps():
    rates = {i: [0.0, 1.0, 0.5, 0.25, 0.125, 0.875, 1 / 3, 0.75][i % 8] for i in range(40)}
    for spec in ("greso+pods", "speed-rl+pods"):
        ctx, eng = make_sampled_ctx(rates, B=4, n=8)
        planner = build_planner(spec, 40, ctx.rng, {"pods": {"m": 4}})
        for step in range(4):
            ctx.step = step
            batch = run_step(planner, ctx, eng, advance_version=True)[0]
            assert 0 < len(batch) <= 4 and all(g.n == 4 for g in batch.groups), spec
            assert all(not g.zero_variance for g in batch.groups), spec  # both only train mixed groups
        led = ctx.ledger
        assert led.count(fate="open") == 0, spec
        assert led.count_rollouts("train", "discarded") > 0 and led.count_rollouts(fate="trained") > 0, spec
    # speed-rl+pods: the screening rows are candidates of the trim too (8 rows -> 4, pilots among them)
    assert any(r.purpose == "pilot" for g in batch.groups for r in g.rollouts)


def test_trainer_runs_knapsack_with_pods_on_the_tiny_model(tmp_path, small_policy):
    """Two steps of `knapsack+pods` through the Trainer (arithmetic task, tiny policy): both components act
    (their metrics are in the rows), the trimmed rows are discarded and the ledger balances."""
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    cfg = load_config(None, {**SMALL, "out": str(tmp_path / "kp"), "steps": 2, "eval_every": 0,
                             "planner": "knapsack+pods", "planner_options": {"pods": {"m": 2}}})
    tr = Trainer(cfg)
    rows = tr.run()
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r.get("pods/dropped", 0) for r in rows) > 0 and all("knapsack/max_n" in r for r in rows)
    led = tr.ledger
    assert led.count(fate="open") == 0 and led.count("train") == led.budget_tokens()
    assert led.count_rollouts("train", "discarded") > 0
    assert led.count_rollouts("train", "trained") <= 2 * SMALL["batch_size"] * 2
