"""Pilot-Commit: keep window, exclusion, buffer strategy, max-variance downsampling, the round
structure through the Planner, flushing, and an exact resume from state_dict."""
import copy
import pickle

import numpy as np
import torch

from rollwise.control.base import Planner
from rollwise.control.pilot_commit import PilotCommit, max_variance_subset
from rollwise.core.types import Group

from fakes import R, drive, make_sampled_ctx, run_step


def plain(x):
    """State must be plain python / numpy / torch values."""
    if isinstance(x, dict):
        return all(isinstance(k, (str, int)) and plain(v) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return all(plain(v) for v in x)
    return x is None or isinstance(x, (bool, int, float, str, np.ndarray, np.generic, torch.Tensor))


def test_keep_window_code_thresholds():
    c = PilotCommit()  # p_lower 0.125, p_upper 0.25 -> keep 0.125 <= m <= 0.75
    assert c.classify(0.8) == "too_correct" and c.classify(1.0) == "too_correct"
    assert c.classify(0.75) == "keep" and c.classify(0.5) == "keep" and c.classify(0.125) == "keep"
    assert c.classify(0.1) == "too_incorrect" and c.classify(0.0) == "too_incorrect"


def test_max_variance_downsampling():
    rng = np.random.default_rng(0)
    r = [1, 1, 1, 1, 1, 0, 0, 0]
    idx = max_variance_subset(r, 4, rng)
    assert len(idx) == 4 and sorted(np.asarray(r)[idx].tolist()) == [0, 0, 1, 1]
    idx = max_variance_subset([1, 0, 0, 0, 0, 0], 4, rng)  # only one 1: take it plus three 0s
    assert sorted(np.asarray([1, 0, 0, 0, 0, 0])[idx].tolist()) == [0, 0, 0, 1]
    idx = max_variance_subset([1, 1, 1, 1, 0], 3, rng)  # m//2 = 1 one, 2 zeros wanted; one 0 only
    assert sorted(np.asarray([1, 1, 1, 1, 0])[idx].tolist()) == [0, 1, 1]
    assert len(set(idx.tolist())) == 3
    # non-binary: the extreme subset
    assert set(max_variance_subset([0.0, 0.5, 1.0, 0.2], 2, rng).tolist()) == {0, 2}
    assert max_variance_subset([1, 0], 5, rng).tolist() == [0, 1]
    # random among equals: both 1s get picked sometimes
    picks = {tuple(max_variance_subset([1, 1, 0, 0], 2, np.random.default_rng(s)).tolist()) for s in range(20)}
    assert len(picks) > 1


def test_pilot_round_buffer_and_exclusion():
    rates = {0: 0.5, 1: 1.0, 2: 0.0, 3: 0.25, 4: 0.75, 5: 0.5}
    ctx, eng = make_sampled_ctx(rates)
    c = PilotCommit(n_pilot=4, n_commit=4)
    c.bind(len(ctx.pool))
    c.begin_step(ctx)
    # round 1: empty buffer -> nothing committed, all candidates piloted
    out = drive(c.select(ctx.pool[:5], 4, ctx), eng, ctx)
    assert out == []
    assert set(c.buffer) == {0, 3, 4}  # 0.5, 0.25, 0.75 kept; 1.0 too correct, 0.0 too hard
    assert c.excluded[1] and not c.excluded[2]  # m >= p_solve = 1.0 -> excluded for good
    assert ctx.ledger.count_rollouts("pilot") == 5 * 4 and ctx.ledger.count_rollouts("train") == 0
    assert [q.purpose for q in eng.requests] == ["pilot"] * 5
    assert ctx.metrics["pc/too_correct"] == 1 and ctx.metrics["pc/too_incorrect"] == 1
    # round 2: commits 2 from the buffer by max_variance (std 0.5 first: prompt 0), pilots fresh ones
    out = drive(c.select([ctx.pool[1], ctx.pool[5]], 2, ctx), eng, ctx)  # prompt 1 is excluded -> not piloted
    assert [p.id for p in out][0] == 0 and len(out) == 2
    assert ctx.ledger.count_rollouts("pilot") == 5 * 4 + 4
    assert 5 in c.buffer and 0 not in c.buffer
    assert c.allocate(out + [ctx.pool[2]], [8, 8, 8], ctx) == [4, 4, 8]


def test_buffer_strategies():
    c = PilotCommit()
    rng = np.random.default_rng(0)
    c.buffer = {7: {"step": 1, "mean": .5, "std": .5, "rollouts": []},
                8: {"step": 3, "mean": .25, "std": .43, "rollouts": []},
                9: {"step": 2, "mean": .5, "std": .5, "rollouts": []}}
    assert c.sample_buffer(2, rng) == [9, 7]  # std desc, then newer first
    c2 = PilotCommit(strategy="most_recent")
    c2.buffer = {7: {"step": 1, "std": .5, "rollouts": []}, 8: {"step": 3, "std": .4, "rollouts": []}}
    assert c2.sample_buffer(1, rng) == [8]
    assert c.flush(step=99) == 1 and not c.buffer


def test_finish_prepends_pilots_and_downsamples():
    ctx, _ = make_sampled_ctx({0: 0.5, 1: 0.5})
    c = PilotCommit(n_pilot=8, n_pilot_keep=4)
    pilots = [R(0, x, "pilot") for x in (1, 1, 1, 1, 1, 1, 0, 0)]
    c.bind(len(ctx.pool))
    c.begin_step(ctx)
    c._commits = {0: pilots}
    fresh = Group(ctx.pool[0], [R(0, 1), R(0, 0)])
    other = Group(ctx.pool[1], [R(1, 1)])
    out = c.finish([fresh, other], ctx)
    assert out[1] is other
    g = out[0]
    assert g.n == 6 and [r.purpose for r in g.rollouts] == ["pilot"] * 4 + ["train"] * 2
    assert sorted(r.correct for r in g.rollouts[:4]) == [False, False, True, True]


def test_planner_steps_flush_and_group_shape():
    rng = np.random.default_rng(3)
    rates = {i: float(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])) for i in range(40)}
    ctx, eng = make_sampled_ctx(rates, B=4)
    c = PilotCommit(n_pilot=4, n_commit=4, max_off_steps=1)
    planner = Planner([c], 40, np.random.default_rng(0))
    for step in range(4):
        ctx.step = step
        batch = run_step(planner, ctx, eng, advance_version=True)[0]
        assert 0 < len(batch) <= 4
        for g in batch.groups:
            assert g.n == 8
            assert [r.purpose for r in g.rollouts] == ["pilot"] * 4 + ["train"] * 4
            assert all(r.fate == "trained" for r in g.rollouts[4:])  # settled by the driver
            assert 0.125 <= np.mean([r.correct for r in g.rollouts[:4]]) <= 0.75
            assert g.rollouts[0].policy_version <= g.rollouts[-1].policy_version
        assert all(step - e["step"] <= 1 for e in c.buffer.values())
    assert ctx.ledger.count_rollouts("train") > 0 and ctx.ledger.count_rollouts("pilot") > 0
    assert c.excluded[[i for i, p in rates.items() if p == 1.0]].any()


def test_max_rounds_caps_pilots():
    rates = {i: 0.0 for i in range(200)}  # nothing passes the pilot
    ctx, eng = make_sampled_ctx(rates, B=4)
    planner = Planner([PilotCommit(max_gen_rounds=3, gen_ratio=2)], 200, np.random.default_rng(0))
    batch = run_step(planner, ctx, eng, advance_version=True)[0]
    assert len(batch) == 0
    assert ctx.ledger.count_rollouts("pilot") == 3 * 8 * 4  # 3 rounds x (2 * 4 candidates) x 4 pilots
    assert ctx.ledger.count_rollouts("pilot", "scored") == 3 * 8 * 4  # measurements, none trained


def test_state_dict_round_trip_and_exact_resume():
    rng = np.random.default_rng(5)
    rates = {i: float(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])) for i in range(30)}
    ctx, eng = make_sampled_ctx(rates, B=3)
    planner = Planner([PilotCommit()], 30, np.random.default_rng(0))
    for step in range(2):
        ctx.step = step
        run_step(planner, ctx, eng, advance_version=True)
    assert planner.components[0].buffer  # something to carry over
    state = planner.state_dict()
    assert plain(state["components"][0])
    state = pickle.loads(pickle.dumps(state))
    snap = (copy.deepcopy(planner.rng.bit_generator.state), copy.deepcopy(ctx.rng.bit_generator.state),
            copy.deepcopy(eng.seen), copy.deepcopy(ctx.history.state_dict()))

    ctx.step = 2
    a = run_step(planner, ctx, eng, advance_version=True)[0]

    rng2 = np.random.default_rng()
    rng2.bit_generator.state = snap[0]
    p2 = Planner([PilotCommit()], 30, rng2)
    p2.load_state_dict(state)
    ctx2, eng2 = make_sampled_ctx(rates, B=3)
    ctx2.rng.bit_generator.state = snap[1]
    eng2.seen, eng2.version = snap[2], 2
    ctx2.history.load_state_dict(snap[3])
    ctx2.step = 2
    b = run_step(p2, ctx2, eng2, advance_version=True)[0]
    sig = lambda batch: [(g.prompt.id, [(r.correct, r.purpose, r.policy_version) for r in g.rollouts]) for g in batch.groups]
    assert sig(a) == sig(b)
    s1, s2 = planner.components[0].state_dict(), p2.components[0].state_dict()
    assert [e["pid"] for e in s1["buffer"]] == [e["pid"] for e in s2["buffer"]]
    assert np.array_equal(s1["excluded"], s2["excluded"])
