"""A run built by injection (run/build.py): build_run(cfg) makes every part once; the Trainer takes them as
handed in, the planner and ledger are configured at construction, and the async loop builds its own pool
and driver from the parts without replacing anything of the Trainer's."""
from __future__ import annotations

from conftest import SMALL
from rollwise.core.staleness import StalenessPolicy
from rollwise.generate.local_pool import LocalEnginePool
from rollwise.replay.spec_rl import MEASURED_DRAFT_COST
from rollwise.run.async_loop import AsyncLoop
from rollwise.run.build import build_run
from rollwise.run.config import load_config
from rollwise.run.loop import Trainer


def config(tmp_path, **kw):
    return load_config(None, {**SMALL, "out": str(tmp_path), **kw})


def test_the_trainer_runs_the_parts_it_is_handed(tmp_path, small_policy):
    cfg = config(tmp_path, planner="uniform+april", max_staleness=2)
    parts = build_run(cfg, log=lambda m: None)
    tr = Trainer(cfg, parts=parts)
    assert (tr.planner, tr.engine, tr.ledger, tr.driver, tr.learner) == \
        (parts.planner, parts.engine, parts.ledger, parts.driver, parts.learner)
    # configured at construction: the run's bound is the planner's, no attribute set after
    assert parts.planner.staleness is parts.staleness == StalenessPolicy(2)
    assert parts.driver.engine is parts.engine and parts.driver.ledger is parts.ledger
    tr.train_step()
    assert tr.step == 1 and tr.ledger.count(fate="open") == 0


def test_the_ledger_takes_the_draft_cost_its_planner_declares(tmp_path, small_policy):
    assert build_run(config(tmp_path, planner="spec-rl"), log=lambda m: None).ledger.draft_cost == MEASURED_DRAFT_COST
    assert build_run(config(tmp_path / "b", planner="uniform"), log=lambda m: None).ledger.draft_cost == 1.0


def test_the_async_loop_replaces_nothing_of_the_trainers(tmp_path, small_policy):
    cfg = config(tmp_path, mode="async", workers=0)
    tr = Trainer(cfg)
    before = dict(vars(tr))
    loop = AsyncLoop(tr.parts, tr)
    try:
        assert isinstance(loop.pool, LocalEnginePool) and loop.driver.engine is loop.pool
        assert loop.driver.ledger is tr.ledger and loop.planner is tr.planner
        after = vars(tr)
        assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)
        assert tr.driver.engine is tr.parts.engine  # the synchronous driver keeps its engine
    finally:
        loop.close()
