"""SPEED-RL (control/speed_rl.py): the screen on known pass rates (scripted engine), the accounting of
screening samples (charged once as pilots; trained with their prompt, scored when it is excluded),
qualified prompts kept for the next step and aged out, one-line refusals, a resume from state, and
`greso+speed-rl` through the real driver."""
import copy
import pickle

import numpy as np
import pytest

from rollwise.control.base import Planner, build_planner
from rollwise.control.speed_rl import SpeedRL

from fakes import drive, make_sampled_ctx, run_step

# The scripted engine's j-th sample of a prompt with rate p is correct iff floor((j+1)p) > floor(jp): of
# the first 4, p = .5 -> 2, p = .25 -> 1, p = .875 -> 3, p = .125 -> 0, p = 1 -> 4, p = 0 -> 0.
RATES = {0: 0.5, 1: 1.0, 2: 0.0, 3: 0.25, 4: 0.125, 5: 0.875}


def test_screen_on_known_pass_rates():
    ctx, eng = make_sampled_ctx(RATES, B=6)
    c = SpeedRL(n_init=4, n_cont=4)
    c.begin_step(ctx)
    out = drive(c.select(ctx.pool, 6, ctx), eng, ctx)
    # 2/4, 1/4 and 3/4 qualify; 4/4 and 0/4 do not (p = .125 is intermediate but its screen shows 0/4)
    assert [p.id for p in out] == [0, 3, 5]
    assert [(q.n, q.purpose) for q in eng.requests] == [(4, "pilot")] * 6  # one screening round
    assert ctx.metrics["speed/screened"] == 6 and ctx.metrics["speed/qualified"] == 3
    assert c.allocate(out + [ctx.pool[1]], [8] * 4, ctx) == [4, 4, 4, 8]  # N_cont for the qualified only
    # a stricter window: 0.25 < rate < 0.75 keeps only the 2/4 prompt
    ctx2, eng2 = make_sampled_ctx(RATES, B=6)
    c2 = SpeedRL(n_init=4, p_low=0.25, p_high=0.75)
    c2.begin_step(ctx2)
    assert [p.id for p in drive(c2.select(ctx2.pool, 6, ctx2), eng2, ctx2)] == [0]


def test_screening_samples_are_charged_once_and_train_with_their_prompt():
    """One step over the 6 prompts with B = 3 (oversample 2: all 6 are screened in one round): 3 qualify,
    each trains as 4 screening + 4 continuation rows; the 3 excluded screens are measurements."""
    ctx, eng = make_sampled_ctx(RATES, B=3, n=8)
    planner = Planner([SpeedRL(n_init=4)], 6, np.random.default_rng(0))
    batch, rejected, rounds = run_step(planner, ctx, eng)
    assert sorted(g.prompt.id for g in batch.groups) == [0, 3, 5] and not rejected
    for g in batch.groups:
        assert [r.purpose for r in g.rollouts] == ["pilot"] * 4 + ["train"] * 4  # n_cont = n - n_init
        assert all(r.fate == "trained" for r in g.rollouts)
        assert 0 < np.mean([r.correct for r in g.rollouts[:4]]) < 1
    assert rounds == [{0: 4, 3: 4, 5: 4}]  # the continuation: one train round, the qualified prompts only
    led = ctx.ledger
    assert led.count_rollouts("pilot") == 6 * 4 and led.count_rollouts("train") == 3 * 4  # each once
    assert led.count_rollouts("pilot", "trained") == 3 * 4 and led.count_rollouts("pilot", "scored") == 3 * 4
    assert led.count_rollouts("train", "trained") == 3 * 4 and led.count(fate="open") == 0
    assert led.budget_rollouts() == 6 * 4 + 3 * 4
    # train_screens=False: the screens only decide; the group is the continuation
    ctx, eng = make_sampled_ctx(RATES, B=3, n=8)
    batch, _, _ = run_step(Planner([SpeedRL(n_init=4, train_screens=False)], 6, np.random.default_rng(0)), ctx, eng)
    assert all([r.purpose for r in g.rollouts] == ["train"] * 4 for g in batch.groups)
    assert ctx.ledger.count_rollouts("pilot", "scored") == 6 * 4 and ctx.ledger.count_rollouts("pilot", "trained") == 0


def test_surplus_qualified_prompts_wait_one_step_then_age_out():
    ctx, eng = make_sampled_ctx(RATES, B=1)
    c = SpeedRL(n_init=4, max_age=1)
    c.begin_step(ctx)
    assert [p.id for p in drive(c.select(ctx.pool, 1, ctx), eng, ctx)] == [0]
    assert list(c.kept) == [3, 5]  # screened, qualified, not needed this step
    c.observe([], None, ctx)  # step 0 ends: one step old next step, within max_age
    ctx.step = 1
    c.begin_step(ctx)
    calls = len(eng.submitted)
    assert [p.id for p in drive(c.select(ctx.pool, 1, ctx), eng, ctx)] == [3]  # kept first, nothing screened
    assert len(eng.submitted) == calls
    c.observe([], None, ctx)  # prompt 5 was screened at step 0: too old for step 2
    assert c.kept == {}


def test_refusals_are_one_line():
    for kw, msg in [({"n_init": 0}, "n_init and n_cont"), ({"n_cont": 0}, "n_init and n_cont"),
                    ({"p_low": 0.5, "p_high": 0.5}, "p_low < p_high"), ({"oversample": 0}, "oversample")]:
        with pytest.raises(ValueError, match=msg) as e:
            SpeedRL(**kw)
        assert "\n" not in str(e.value) and str(e.value).startswith("speed-rl:")
    with pytest.raises(ValueError, match="speed-rl needs on-demand sampling"):
        build_planner("speed-rl", 6, np.random.default_rng(0)).require("a host", policy=True, refill=True)


def test_state_round_trip_resumes_exactly():
    rng = np.random.default_rng(5)
    rates = {i: float(rng.choice([0.0, 0.25, 0.5, 0.75, 1.0])) for i in range(30)}
    ctx, eng = make_sampled_ctx(rates, B=3)
    planner = Planner([SpeedRL(oversample=3)], 30, np.random.default_rng(0))
    run_step(planner, ctx, eng, advance_version=True)
    assert planner.components[0].kept  # something carried to the next step
    state = pickle.loads(pickle.dumps(planner.state_dict()))
    snap = copy.deepcopy((planner.rng.bit_generator.state, ctx.rng.bit_generator.state, eng.seen, ctx.history.state_dict()))
    ctx.step = 1
    a = run_step(planner, ctx, eng, advance_version=True)[0]
    rng2 = np.random.default_rng()
    rng2.bit_generator.state = snap[0]
    p2 = Planner([SpeedRL(oversample=3)], 30, rng2)
    p2.load_state_dict(state)
    ctx2, eng2 = make_sampled_ctx(rates, B=3)
    ctx2.rng.bit_generator.state, eng2.seen, eng2.version = snap[1], snap[2], 1
    ctx2.history.load_state_dict(snap[3])
    ctx2.step = 1
    b = run_step(p2, ctx2, eng2, advance_version=True)[0]
    sig = lambda batch: [(g.prompt.id, [(r.correct, r.purpose, r.policy_version) for r in g.rollouts]) for g in batch.groups]
    assert sig(a) == sig(b) and any(r.policy_version == 0 for g in a.groups for r in g.rollouts[:4])


def test_greso_with_speed_rl_runs_steps_and_settles_every_row():
    """`greso+speed-rl`, 5 steps over 40 prompts: GRESO skips prompts with zero-variance streaks before
    they are screened, SPEED screens the rest; every trained group mixes outcomes and the ledger settles
    every rollout once. A screen kept from the step before trains as reused tokens (it was settled
    "scored" in its own step): charged once, never twice."""
    rates = {i: [0.0, 1.0, 0.5, 0.25, 0.125, 0.875, 1 / 3, 0.75][i % 8] for i in range(40)}
    ctx, eng = make_sampled_ctx(rates, B=4, n=8)
    planner = build_planner("greso+speed-rl", 40, ctx.rng)
    trained = 0
    for step in range(5):
        ctx.step = step
        batch = run_step(planner, ctx, eng, advance_version=True)[0]
        assert 0 < len(batch) <= 4 and all(not g.zero_variance for g in batch.groups)
        assert all([r.purpose for r in g.rollouts] == ["pilot"] * 4 + ["train"] * 4 for g in batch.groups)
        trained += len(batch)
    led = ctx.ledger
    late = 4 * trained - led.count_rollouts("pilot", "trained")  # kept screens trained a step later
    assert led.count(fate="open") == 0 and late > 0 and led.reused_tokens == 3 * late  # 3 tokens a row
    assert led.budget_rollouts() == led.count_rollouts("pilot") + led.count_rollouts("train")
