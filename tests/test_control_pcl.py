"""PCL (control/pcl.py): the ridge head on hand-computed data, the closest-to-tau ranking, a cold start that is
the draw order, a run that learns to pick intermediate prompts, the charged prefill, exact resumes."""
import copy

import numpy as np
import pytest
import torch

from rollwise.control.base import StepContext, build_planner
from rollwise.control.pcl import PCL, PassRateHead
from rollwise.core import registry
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Batch, Group, Prompt, Rollout
from rollwise.run.config import load_config
from rollwise.run.driver import StepDriver

from fakes import Engine, run_step

N = 48
RATE = [0.0, 0.25, 0.5, 0.75, 1.0]  # pass rate of prompt i is RATE[i % 5] (n = 4: exact counts)
POOL = [Prompt(i, f"{i}?", "") for i in range(N)]


def rate(i):
    return RATE[i % 5]


class FakePolicy:
    """A 2-d embedding per prompt: (its pass rate, its id parity); encode is one token per character."""

    def encode(self, text):
        return list(text)

    def prompt_stats(self, texts):
        ids = [int(t[:-1]) for t in texts]
        return np.zeros(len(ids)), np.array([[rate(i), i % 2] for i in ids], dtype=np.float64)


def context(seed=0, B=4):
    ledger, policy = Ledger(), FakePolicy()
    ctx = StepContext(0, B, 4, POOL, PromptHistory(N), ledger, np.random.default_rng(seed), policy)
    ctx.prompt_stats = StepDriver(Engine({}), ledger, None, policy=policy).prompt_stats  # charges the prefill
    return ctx


# ---- the head ---------------------------------------------------------------------------------------------

def test_head_is_ridge_on_standardised_embeddings_by_hand():
    # x = 0, 1, 2, 3 with y = 0, .25, .5, .75: the least-squares slope is 0.25 per unit of x, and ridge on the
    # standardised x (variance 1) shrinks it by 1 / (1 + l2); the intercept is the mean label 0.375
    h = PassRateHead(l2=0.1, buffer=10)
    assert (h.predict(np.zeros((3, 1))) == 0.5).all()  # cold: 0.5 for everything
    h.update(np.array([[0.0], [1.0], [2.0], [3.0]]), [0.0, 0.25, 0.5, 0.75])
    slope = 0.25 / 1.1
    assert np.allclose(h.predict(np.array([[1.5], [3.0], [100.0]])), [0.375, 0.375 + 1.5 * slope, 1.0])


def test_head_dual_solve_equals_the_primal_and_the_replay_is_bounded():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(3, 6)), rng.random(3)  # fewer labels than dimensions: the n x n system
    h = PassRateHead(l2=0.3, buffer=10)
    h.update(X, y)
    Z = (X - X.mean(0)) / X.std(0)
    w = np.linalg.solve(Z.T @ Z / 3 + 0.3 * np.eye(6), Z.T @ (y - y.mean()) / 3)
    assert np.allclose(h.w_D, w)
    h = PassRateHead(l2=0.3, buffer=4)
    h.update(X, y)
    h.update(X, y)
    assert len(h.y_N) == 4 and np.allclose(h.y_N, [y[2], *y])  # the last `buffer` labels


# ---- selection ------------------------------------------------------------------------------------------

def test_rank_is_closest_to_tau_with_ties_in_draw_order():
    assert PCL().rank(np.array([0.0, 0.9, 0.45, 0.55, 1.0, 0.6])).tolist() == [2, 3, 5, 1, 0, 4]
    assert PCL(tau=0.9).rank(np.array([0.0, 0.9, 0.45])).tolist() == [1, 2, 0]


def test_cold_start_is_the_draw_order_and_the_prefill_is_charged():
    ctx, pcl = context(), PCL()
    out = pcl.select(POOL[:16], 4, ctx)
    assert out == POOL[:16]  # every prediction is 0.5: a stable sort keeps the (random) draw order
    assert ctx.ledger.scoring_tokens == sum(len(p.text) for p in POOL[:16])
    assert ctx.metrics["pcl/pred_mean"] == 0.5


def test_observe_trains_on_the_trained_groups_then_ranks_by_prediction():
    ctx, pcl = context(), PCL(l2=0.01)
    pcl.select(POOL[:10], 5, ctx)
    groups = [make_group(i) for i in range(5)]  # prompts 0..4, pass rates 0, .25, .5, .75, 1
    pcl.observe(groups, Batch(groups), ctx)
    assert ctx.metrics["pcl/labels"] == 5 and ctx.metrics["pcl/abs_err"] == pytest.approx(np.mean([.5, .25, 0, .25, .5]))
    out = pcl.select(POOL[10:20], 2, ctx)
    # the head reads the pass rate off the first embedding coordinate: rates 0.5 (12, 17) first, then
    # .25/.75 (11, 13, 16, 18), then 0/1
    assert {p.id for p in out[:2]} == {12, 17} and {p.id for p in out[2:6]} == {11, 13, 16, 18}


def make_group(i):
    k = int(round(rate(i) * 4))
    rs = [Rollout(i, [1], torch.ones(2, dtype=torch.long), torch.zeros(2), "", "eos", 0, reward=float(j < k),
                  correct=j < k) for j in range(4)]
    return Group(POOL[i], rs)


def test_a_run_learns_to_train_intermediate_prompts():
    """Through the real step driver with a seeded draw: step 0 trains a uniform draw; once the head has
    labels, no prompt the policy always or never solves is trained."""
    ctx = context(seed=3)
    planner = build_planner("pcl", N, ctx.rng)
    engine = Engine({i: rate(i) for i in range(N)})
    scored, stats = [], ctx.prompt_stats
    ctx.prompt_stats = lambda texts: (scored.extend(texts), stats(texts))[1]
    trained = []
    for s in range(4):
        ctx.step = s
        batch, _, _ = run_step(planner, ctx, engine, advance_version=True)
        trained.append(sorted(rate(g.prompt.id) for g in batch.groups))
    assert len(trained[0]) == 4 and all(len(t) == 4 for t in trained)
    assert all(0.0 < r < 1.0 for t in trained[1:] for r in t), trained
    assert len(scored) == 4 * 16  # k x B = 16 candidates scored a step, every one charged
    assert ctx.ledger.scoring_tokens == sum(len(t) for t in scored)


def test_state_round_trips_to_the_same_choices():
    ctx = context(seed=1)
    a = build_planner("pcl", N, ctx.rng)
    engine = Engine({i: rate(i) for i in range(N)})
    for s in range(2):
        ctx.step = s
        run_step(a, ctx, engine, advance_version=True)
    b = build_planner("pcl", N, np.random.default_rng(99))
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    ctx2 = copy.deepcopy(ctx)
    ctx2.prompt_stats = StepDriver(Engine({}), ctx2.ledger, None, policy=FakePolicy()).prompt_stats
    engine2 = copy.deepcopy(engine)
    outs = []
    for planner, c, e in ((a, ctx, engine), (b, ctx2, engine2)):
        c.step = 2
        batch, _, _ = run_step(planner, c, e, advance_version=True)
        outs.append([g.prompt.id for g in batch.groups])
    assert outs[0] == outs[1]


def test_registered_options_are_checked_in_one_line():
    assert registry.get("planner", "pcl").obj is PCL and PCL.needs_policy
    with pytest.raises(ValueError, match=r"^pcl: tau must be in \[0, 1\] \(the target pass rate\), got 1\.5$"):
        PCL(tau=1.5)
    with pytest.raises(ValueError, match=r"^pcl: k must be >= 1 \(candidates scored per prompt trained\), got 0$"):
        PCL(k=0)
    with pytest.raises(ValueError, match=r"planner_options\.pcl\.buffer must be an integer, got 'x'"):
        load_config(None, {"planner": "pcl", "planner_options": {"pcl": {"buffer": "x"}}})


def test_trainer_runs_pcl_with_rl_zvp_and_resumes_exactly(tmp_path, small_policy):
    """Two steps through the Trainer on the arithmetic task: the candidates' prefill is charged as scoring,
    the head's figures are in the metrics, zero-variance rows train under rl-zvp, and a run resumed from its
    step-1 checkpoint (the head's replay in it) continues exactly."""
    from conftest import SMALL
    from rollwise.run.loop import Trainer
    from rollwise.run.records import TIMING

    def trainer(out, steps):
        return Trainer(load_config(None, {**SMALL, "out": str(tmp_path / out), "steps": steps, "eval_every": 0,
                                          "planner": "pcl", "learner.advantage": "rl-zvp"}))

    strip = lambda rows: [{k: v for k, v in r.items() if k not in TIMING} for r in rows]  # noqa: E731
    rows = strip(trainer("a", 2).run())
    assert [r["step"] for r in rows] == [1, 2]
    assert 0 < rows[0]["scoring_tokens"] < rows[1]["scoring_tokens"]  # running totals: every step scores
    assert all(r["pcl/labels"] == SMALL["batch_size"] and 0 <= r["pcl/abs_err"] <= 1 for r in rows)
    zero_var_rows = [r["zero_var_frac"] * r["batch_groups"] * SMALL["n"] for r in rows]
    assert any(z > 0 for z in zero_var_rows)  # the briefly warm-started base has all-equal groups...
    assert all(r["learn_rows"] > r["batch_rollouts"] - z for r, z in zip(rows, zero_var_rows))  # ...which train
    trainer("b", 1).run()
    assert strip(trainer("b", 2).run()) == rows
