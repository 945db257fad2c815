"""POPO (replay/popo.py): the swap on a batch with two zero-variance groups (hand-computed priority,
age limit, one group per prompt), the driver's accounting (replaced rows discarded, replayed rows
reused and never charged again, their age in the staleness figures), one-line refusals, a resume from
state, and compositions (greso+popo, ar3po+popo) through the real driver."""

import numpy as np
import pytest

from rollwise.control.base import Planner, build_planner
from rollwise.core.types import Group
from rollwise.replay.popo import POPO
from rollwise.core.staleness import lag_metrics as staleness

from fakes import R, make_ctx, make_sampled_ctx, replay_runs_after_resume, run_step


def fresh(ctx, pid, wins, version=4):
    rs = [R(pid, w, version=version) for w in wins]
    for r in rs:
        r.fate = "open"  # charged this step, as the driver leaves them before settling
    return Group(ctx.pool[pid], rs)


def entry(pid, wins, version):
    rs = [R(pid, w, version=version) for w in wins]
    for r in rs:
        r.fate = "trained"
    return {"pid": pid, "version": version, "var": float(np.var(wins)), "rollouts": rs}


def test_swap_on_a_batch_with_two_zero_variance_groups():
    """Version 4, max_age 2. Buffer (oldest first): C (prompt 12, v1, var .25), D (prompt 0, v3), B (prompt
    11, v3, var .1875), A (prompt 10, v3, var .25). C is 3 versions old: dropped. D's prompt is in this
    batch: skipped (kept for later). Priority newest, then larger variance: A, then B. The all-right group
    of prompt 1 gets A, the all-wrong group of prompt 2 gets B; the effective groups stay."""
    ctx = make_ctx(pool_size=16)
    c = POPO(max_age=2)
    c.buffer = [entry(12, [1, 0], 1), entry(0, [1, 0], 3), entry(11, [1, 0, 0, 0], 3), entry(10, [1, 0, 1, 0], 3)]
    groups = [fresh(ctx, 0, [1, 0]), fresh(ctx, 1, [1, 1, 1, 1]), fresh(ctx, 2, [0, 0, 0, 0]), fresh(ctx, 3, [0, 1])]
    c.begin_step(ctx)
    out = c.finish(groups, ctx)
    assert [g.prompt.id for g in out] == [0, 10, 11, 3]
    assert out[0] is groups[0] and out[3] is groups[3]
    a = out[1]
    assert [r.reward for r in a.rollouts] == [1, 0, 1, 0] and a.meta["replay_age"] == 1
    assert all(r.meta["replay_age"] == 1 and r.policy_version == 3 and r.fate == "trained" for r in a.rollouts)
    stored = entry(10, [1, 0, 1, 0], 3)["rollouts"]
    assert all(x is not y and x.token_ids_T.tolist() == y.token_ids_T.tolist() for x, y in zip(a.rollouts, stored))
    assert [e["pid"] for e in c.buffer] == [0]  # C too old, A and B replayed once, D waits
    assert ctx.metrics["popo/replayed"] == 2 and ctx.metrics["popo/replay_age_mean"] == 1.0
    # nothing to replay: the zero-variance group stays (it trains as in GRPO)
    c2 = POPO()
    g = [fresh(ctx, 1, [1, 1])]
    assert c2.finish(g, ctx) == g


def test_driver_accounting_and_staleness():
    """8 prompts, B = 4, n = 4: step 0 rolls out four (the buffer takes its effective groups), step 1 the
    other four; each zero-variance group of step 1 is swapped for a step-0 group while any is left."""
    rates = {0: 0.5, 1: 1.0, 2: 0.0, 3: 0.25, 4: 0.5, 5: 1.0, 6: 0.0, 7: 0.25}
    ctx, eng = make_sampled_ctx(rates, B=4, n=4)
    popo = POPO()
    planner = Planner([popo], 8, np.random.default_rng(0))
    run_step(planner, ctx, eng, advance_version=True)
    buffered = [e["pid"] for e in popo.buffer]
    assert buffered and all(rates[p] in (0.5, 0.25) for p in buffered)
    ctx.step = 1
    before = (ctx.ledger.count_rollouts("train", "discarded"), ctx.ledger.reused_tokens)
    batch, _, _ = run_step(planner, ctx, eng, advance_version=True)
    zv = [g for g in ctx.groups.values() if g.zero_variance]
    swaps = min(len(zv), len(buffered))
    assert swaps > 0
    replayed = [g for g in batch.groups if "replay_age" in g.meta]
    assert len(replayed) == swaps and len(batch.groups) == 4
    assert all(r.meta["replay_age"] == 1 and r.policy_version == 0 for g in replayed for r in g.rollouts)
    led = ctx.ledger
    assert led.count_rollouts("train", "discarded") - before[0] == 4 * swaps  # the replaced rows
    assert led.reused_tokens - before[1] == 3 * 4 * swaps  # replayed rows: reused, 3 tokens each
    assert led.count(fate="open") == 0 and led.budget_rollouts() == 2 * 4 * 4  # nothing generated twice
    assert staleness(batch, 1)["staleness_max"] == 1
    assert ctx.history.visits[[g.prompt.id for g in replayed]].tolist() == [1] * swaps  # not a new visit


def test_refusals_are_one_line():
    for kw in ({"capacity": 0}, {"max_age": 0}):
        with pytest.raises(ValueError, match="popo: need capacity >= 1 and max_age >= 1") as e:
            POPO(**kw)
        assert "\n" not in str(e.value)


def test_state_round_trip_resumes_exactly():
    original, resumed = replay_runs_after_resume("popo")
    assert original == resumed and any(age is not None for step in original for _, age, _ in step)


@pytest.mark.parametrize("spec", ["greso+popo", "ar3po+popo"])
def test_compositions_run_steps(spec):
    rates = {i: [0.0, 1.0, 0.5, 0.25, 0.125, 0.875, 1 / 3, 0.75][i % 8] for i in range(40)}
    ctx, eng = make_sampled_ctx(rates, B=4, n=4)
    planner = build_planner(spec, 40, ctx.rng)
    replays = 0
    for step in range(5):
        ctx.step = step
        batch = run_step(planner, ctx, eng, advance_version=True)[0]
        ids = [g.prompt.id for g in batch.groups]
        assert len(ids) == len(set(ids)) and len(ids) <= 4, spec
        for g in batch.groups:
            ages = {r.meta.get("replay_age") for r in g.rollouts if hasattr(r, "meta")}
            assert ages <= {None} or ages <= set(range(1, 5)), spec  # within max_age
        replays += sum("replay_age" in g.meta for g in batch.groups)
    led = ctx.ledger
    assert led.count(fate="open") == 0 and led.count() == led.budget_tokens() == eng_tokens(eng), spec
    assert replays > 0, spec


def eng_tokens(eng):
    return 3 * sum(q.n for q in eng.requests)  # the scripted engine's rows are 3 tokens each


def test_trainer_runs_popo_with_the_decoupled_correction(tmp_path, cache_dir):
    """Three steps of `popo` through the Trainer on the tiny model (level-1 sums, where the briefly
    warm-started policy solves some), trained with the decoupled correction (`areal-decoupled` +
    `ppo-clip`, pi_prox recomputed): a group is replayed a step late, the staleness figures show it, and
    the ledger balances."""
    from conftest import SMALL
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    task = {**SMALL["task_options"], "level_weights": [1, 0, 0, 0, 0, 0], "pool_size": 100}
    cfg = load_config(None, {**SMALL, "task_options": task, "n": 8, "out": str(tmp_path / "popo"), "steps": 3,
                             "eval_every": 0, "planner": "popo",
                             "learner": {"correction": "areal-decoupled", "loss": "ppo-clip"}})
    tr = Trainer(cfg)
    rows = tr.run()
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert sum(r.get("popo/replayed", 0) for r in rows) > 0
    assert max(r["staleness_max"] for r in rows) >= 1
    led = tr.ledger
    assert led.count(fate="open") == 0 and led.count("train") == led.budget_tokens() and led.reused_tokens > 0
