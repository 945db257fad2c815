"""Experience replay (replay/experience_replay.py): the fresh quota, the fill from the buffer by hand (age
limit, reuse cap, a prompt already in the batch), the driver's accounting over two steps (replayed rows
reused, never charged again, their age and correction on every row), the learner's compute charged for
them through the Trainer, a resume from state, and one-line refusals."""

import numpy as np
import pytest

from rollwise.control.base import Planner, build_planner
from rollwise.core.types import Group
from rollwise.replay.experience_replay import ExperienceReplay

from fakes import R, make_ctx, make_sampled_ctx, replay_runs_after_resume, run_step


def stored(pid, wins, version, uses=0):
    rs = [R(pid, w, version=version) for w in wins]
    for r in rs:
        r.fate = "trained"
    return {"pid": pid, "version": version, "var": float(np.var(wins)), "rollouts": rs, "uses": uses}


def fresh(ctx, pid, wins, version=4):
    rs = [R(pid, w, version=version) for w in wins]
    for r in rs:
        r.fate = "open"
    return Group(ctx.pool[pid], rs)


def test_the_fresh_quota_holds_back_prompts_only_while_the_buffer_can_fill_the_batch():
    """B = 4, fresh = .5: two prompts generated fresh when 2 buffered groups are eligible; with 1 eligible,
    three; with none, all four (GRPO)."""
    ctx = make_ctx(pool_size=16, B=4, n=8)
    c = ExperienceReplay(fresh=0.5, max_age=2)
    c.version = 4
    for buffer, kept in (([stored(10, [1, 0], 3), stored(11, [1, 0], 2)], [8, 8, 0, 0]),
                         ([stored(10, [1, 0], 3), stored(11, [1, 0], 1)], [8, 8, 8, 0]),  # v1 is 3 versions old
                         ([], [8, 8, 8, 8])):
        c.buffer = buffer
        c.begin_step(ctx)
        assert c.allocate(ctx.pool[:4], [8] * 4, ctx) == kept
        assert ctx.metrics["replay/fresh"] == sum(k > 0 for k in kept)
    # a second draw in the same step (a refill) gets nothing once the quota is drawn
    c.buffer = [stored(10, [1, 0], 3), stored(11, [1, 0], 2)]
    c.begin_step(ctx)
    c.allocate(ctx.pool[:4], [8] * 4, ctx)
    assert c.allocate(ctx.pool[4:6], [8, 8], ctx) == [0, 0]


def test_fill_from_the_buffer_by_hand():
    """Version 4, max_age 2, B = 4, two fresh groups (prompts 0, 1). Buffer: prompt 12 at v1 (too old:
    dropped), prompt 0 at v3 (in the batch: skipped, kept), prompts 10 and 11 at v3 (eligible). Two slots:
    both 10 and 11 replay, with age 1 and the run's correction on every row; with max_reuse 1 they leave the
    buffer, and prompt 0's group waits."""
    ctx = make_ctx(pool_size=16, B=4)
    ctx.correction = "tis-token"
    c = ExperienceReplay(fresh=0.5, max_age=2, max_reuse=1)
    c.buffer = [stored(12, [1, 0], 1), stored(0, [1, 0], 3), stored(11, [1, 0, 0, 0], 3), stored(10, [1, 0, 1, 0], 3)]
    groups = [fresh(ctx, 0, [1, 0]), fresh(ctx, 1, [1, 1])]
    c.begin_step(ctx)
    out = c.finish(groups, ctx)
    assert out[:2] == groups and sorted(g.prompt.id for g in out[2:]) == [10, 11]
    for g in out[2:]:
        assert g.meta["replay_age"] == 1
        assert all(r.meta["replay_age"] == 1 and r.meta["replay_correction"] == "tis-token" and r.policy_version == 3
                   and r.fate == "trained" for r in g.rollouts)
    assert [e["pid"] for e in c.buffer] == [0]
    assert ctx.metrics["replay/replayed"] == 2 and ctx.metrics["replay/age_mean"] == 1.0
    # with max_reuse 2 a replayed group stays for one more use; no correction known: "unknown"
    ctx2 = make_ctx(pool_size=16, B=3)
    c2 = ExperienceReplay(max_reuse=2)
    c2.buffer = [stored(10, [1, 0], 4)]
    c2.begin_step(ctx2)
    out = c2.finish([fresh(ctx2, 0, [1, 0])], ctx2)
    assert [g.prompt.id for g in out] == [0, 10] and c2.buffer[0]["uses"] == 1
    assert out[1].rollouts[0].meta["replay_correction"] == "unknown"


def test_driver_accounting_over_two_steps():
    """8 prompts, B = 4, n = 4. Step 0: the buffer is empty, four prompts fresh; it keeps the effective
    groups (pass rates .5 and .25). Step 1: two prompts fresh, the batch filled with two buffered groups:
    their rows are reused (3 tokens each, never charged again) and one version old."""
    rates = {0: 0.5, 1: 1.0, 2: 0.25, 3: 0.5, 4: 0.5, 5: 0.0, 6: 0.25, 7: 0.5}
    ctx, eng = make_sampled_ctx(rates, B=4, n=4)
    rep = ExperienceReplay(fresh=0.5)
    planner = Planner([rep], 8, np.random.default_rng(0))
    batch, _, rounds = run_step(planner, ctx, eng, advance_version=True)
    assert len(batch.groups) == 4 and sum(rounds[0].values()) == 16
    assert len(rep.buffer) >= 2 and all(rates[e["pid"]] in (0.5, 0.25) for e in rep.buffer)
    ctx.step = 1
    reused_before = ctx.ledger.reused_tokens
    batch, _, rounds = run_step(planner, ctx, eng, advance_version=True)
    assert rounds == [{pid: 4 for pid in rounds[0]}] and len(rounds[0]) == 2  # two prompts generated
    replayed = [g for g in batch.groups if "replay_age" in g.meta]
    assert len(batch.groups) == 4 and len(replayed) == 2
    assert all(r.meta["replay_age"] == 1 and r.policy_version == 0 for g in replayed for r in g.rollouts)
    led = ctx.ledger
    assert led.reused_tokens - reused_before == 2 * 4 * 3
    assert led.budget_rollouts() == 16 + 8 and led.count(fate="open") == 0  # nothing decoded twice
    assert ctx.history.visits[[g.prompt.id for g in replayed]].tolist() == [1, 1]  # not a new visit


def test_state_round_trip_resumes_exactly():
    original, resumed = replay_runs_after_resume("replay")
    assert original == resumed and any(age is not None for step in original for _, age, _ in step)


def test_refusals_are_one_line():
    for kw in ({"fresh": 0}, {"fresh": 1.5}, {"capacity": 0}, {"max_reuse": 0}, {"max_age": 0}):
        with pytest.raises(ValueError, match="replay: need") as e:
            ExperienceReplay(**kw)
        assert "\n" not in str(e.value)
    for spec in ("replay+popo", "popo+replay"):
        with pytest.raises(ValueError, match="replay does not compose with popo"):
            build_planner(spec, 4, np.random.default_rng(0))


def test_trainer_runs_ar3po_with_replay_and_charges_the_learner(tmp_path):
    """Two steps of `ar3po+replay` through the Trainer on the tiny model: step 2 trains replayed groups
    (reused tokens, not decoded again) and the learner's tokens count every trained row, replayed ones
    included; the learner is told the correction (tis-token) and each replayed row says so."""
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    # the shipped arithmetic base (it solves some prompts: effective groups to buffer), a small step
    cfg = load_config(None, {"out": str(tmp_path / "rp"), "steps": 2, "eval_every": 0, "batch_size": 8, "n": 4,
                             "planner": "ar3po+replay", "learner": {"correction": "tis-token"}})
    tr = Trainer(cfg)
    rows = tr.run()
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["replay/replayed"] > 0 and rows[1]["tokens_reused"] > 0
    led = tr.ledger
    assert led.count(fate="open") == 0
    # the learner ran over every trained token, the replayed ones among them (prompt + response, 1 epoch)
    assert led.learner_tokens >= led.count("train", "trained") + led.reused_tokens


def test_a_step_draws_only_the_prompts_it_generates_so_an_epoch_visits_every_prompt():
    """draws(): 8 prompts, B = 4, fresh = .5. Step 0 (empty buffer) draws and generates 4; later steps
    draw and generate only their quota, so the epoch's pass is used up by generated prompts alone and
    every prompt is generated once before any is generated twice (before the hook, held-back prompts
    were drawn with n = 0 and an epoch ended having generated about half of them)."""
    rates = {i: r for i, r in enumerate([0.5, 0.25, 0.5, 0.75, 0.5, 0.25, 0.5, 0.75])}
    ctx, eng = make_sampled_ctx(rates, B=4, n=4)
    rep = ExperienceReplay(fresh=0.5)
    planner = Planner([rep], 8, np.random.default_rng(0))
    generated = []
    for step in range(4):
        ctx.step = step
        _, _, rounds = run_step(planner, ctx, eng, advance_version=True)
        generated += [pid for r in rounds for pid in r]
        s = planner.sampler
        assert s.epoch * 8 + s.pos == len(generated)  # drawn == generated
    assert len(generated) < 16 and sorted(generated[:8]) == list(range(8))
    assert generated[:4] and len(set(generated[:8])) == 8


def test_a_refill_round_past_the_quota_draws_nothing():
    ctx = make_ctx(pool_size=16, B=4, n=8)
    c = ExperienceReplay(fresh=0.5, max_age=2)
    c.version = 4
    c.buffer = [stored(10, [1, 0], 3), stored(11, [1, 0], 2)]
    c.begin_step(ctx)
    assert c.draws(4, ctx) == 2
    c.allocate(ctx.pool[:2], [8, 8], ctx)
    assert c.draws(2, ctx) == 0
