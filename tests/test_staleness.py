"""One staleness policy (run/staleness.py): its decisions on hand-computed lags, the carried rows it drops
at lags S, S+1 and S+2, and its wiring: the bound a run's config sets reaches the planner's check on
resumed partial rows (async mode always, the synchronous loop only when max_staleness is set)."""
import pytest

from rollwise.run.records import TIMING
from rollwise.control.partial import CarryStore
from rollwise.control.base import build_planner
from rollwise.core.types import Group, Prompt
from rollwise.core.staleness import StalenessGate, StalenessPolicy

from fakes import TokenEngine, make_ctx, run_step


def test_policy_decisions_on_hand_computed_lags():
    p = StalenessPolicy(1)
    # learner version 5: tokens of versions 4 (lag 1 = S) pass, 3 (S + 1) and 2 (S + 2) fail
    assert p.fresh_enough(4, 5) and not p.fresh_enough(3, 5) and not p.fresh_enough(2, 5)
    assert StalenessPolicy(0).fresh_enough(5, 5) and not StalenessPolicy(0).fresh_enough(4, 5)
    assert StalenessPolicy(None).fresh_enough(0, 100)  # unbounded
    # admission: step t once version >= t - S; S = 0 is fully synchronous (prime-rl #1902)
    assert p.admits(3, 2) and not p.admits(4, 2)
    assert StalenessPolicy(0).admits(2, 2) and not StalenessPolicy(0).admits(3, 2)
    # sampling weights: version t - S exactly, never older than the oldest kept
    assert p.sampling_version(7) == 6 and p.sampling_version(7, oldest_kept=6) == 6
    assert StalenessPolicy(2).sampling_version(1, oldest_kept=0) == 0
    with pytest.raises(ValueError, match="max_staleness must be >= 0"):
        StalenessPolicy(-1)


def test_for_run_async_always_sync_only_when_set():
    assert StalenessPolicy.for_run("async", None).max_staleness == 1
    assert StalenessPolicy.for_run("async", 3).max_staleness == 3
    assert not StalenessPolicy.for_run("sync", None).bounded
    assert StalenessPolicy.for_run("sync", 0).max_staleness == 0


def test_the_gate_admits_by_the_policy():
    g = StalenessGate(1, version=2)
    assert g.allowed(3) and not g.allowed(4)
    assert g.fresh_enough(1) and not g.fresh_enough(0)


def _carried(pid, oldest):
    """A carried group of one aborted row whose tokens were sampled at versions oldest, oldest + 1."""
    from fakes import R

    r = R(pid, 0)
    r.status, r.finish_reason = "aborted", "abort"
    import torch

    r.versions_T = torch.tensor([oldest, oldest + 1, oldest + 1])
    return Group(Prompt(pid, f"q{pid}", str(pid)), [r])


@pytest.mark.parametrize("S", [0, 1, 2])
def test_carried_rows_at_lag_s_resume_and_at_s_plus_1_or_2_are_dropped(S):
    version = 10
    store = CarryStore()
    store.groups = [_carried(0, version - S), _carried(1, version - S - 1), _carried(2, version - S - 2)]
    requests, owners, ready, dropped = store.resume(version, StalenessPolicy(S))
    assert [g.prompt.id for g in dropped] == [1, 2]  # lag S + 1 (carried once too far) and S + 2 (twice)
    # the fresh one continues its row; the dropped ones are asked for again from scratch (owner None)
    assert [(r.prompt.id, r.prefix is not None, o is not None) for r, o in zip(requests, owners)] == \
        [(0, True, True), (1, False, False), (2, False, False)]


def _lengths(table):
    return lambda pid, j: table[pid]


@pytest.mark.parametrize("S,dropped_at", [(None, None), (2, None), (1, 3)])
def test_sync_bound_drops_a_row_when_its_lag_passes_s(S, dropped_at):
    """One prompt wants 9 tokens and gets 4 a step (segment budget): its row is resumed at steps 2 and 3,
    where its oldest token (version 0) lags 1 and 2 behind the learner. Unbounded or S = 2 it finishes at
    step 3; with S = 1 it is dropped at step 3 (lag 2 = S + 1), its tokens charged as aborted."""
    ctx = make_ctx(pool_size=1, B=1, n=1)
    eng = TokenEngine(_lengths({0: 9}), rates={0: 1.0})
    planner = build_planner("april", 1, ctx.rng, {"april": {"overprovision": 0.0, "segment_tokens": 4}})
    planner.staleness = StalenessPolicy(S)
    aborted = []
    for _ in range(3):
        run_step(planner, ctx, eng, advance_version=True)
        ctx.step += 1
        aborted.append(ctx.ledger.count(fate="aborted"))
    if dropped_at is None:
        assert aborted == [0, 0, 0] and ctx.ledger.count(fate="trained") == 9
    else:  # the 8 tokens of its first two segments are aborted at step 3, and the prompt starts over
        assert aborted == [0, 0, 8]
    assert ctx.ledger.count() == eng.decoded


@pytest.mark.parametrize("mode,S,expect", [("async", None, 1), ("async", 2, 2), ("sync", None, None), ("sync", 1, 1)])
def test_the_run_hands_its_bound_to_the_planner(tmp_path, mode, S, expect):
    """The bug of 0.3: with --mode async the planner's check on resumed rows never got the bound."""
    from rollwise.run.config import load_config
    from rollwise.run.loop import Trainer

    over = {"out": str(tmp_path), "planner": "uniform+april", "mode": mode, "steps": 1, "batch_size": 2, "n": 2,
            "eval_every": 0}
    if S is not None:
        over["max_staleness"] = S
    tr = Trainer(load_config(None, over), log=lambda *a: None)
    assert tr.planner.staleness.max_staleness == expect
    assert tr.planner.staleness is tr.staleness


# ---- the async loop without Ray (--workers 0): in the core suite ----------------------------------------
def _async_cfg(out, **kw):
    from rollwise.run.config import load_config

    from conftest import SMALL

    return load_config(None, {**SMALL, "out": str(out), "eval_every": 2, "checkpoint_every": 2, **kw})


def _run(c):
    import torch

    from rollwise.run.loop import Trainer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the async learner uses one thread; compare like with like
    try:
        return Trainer(c, log=lambda *a: None).run()
    finally:
        torch.set_num_threads(threads)


def _aborted(row) -> int:
    """Tokens charged as aborted so far (the ledger's tok/<purpose>/aborted/<kind> counts)."""
    return sum(v for k, v in row.items() if k.startswith("tok/") and k.split("/")[2] == "aborted")


def _strip(rows):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def test_in_process_async_with_s0_is_the_synchronous_loop(tmp_path, small_policy):
    sync = _run(_async_cfg(tmp_path / "s", steps=3))
    asyn = _run(_async_cfg(tmp_path / "a", steps=3, mode="async", workers=0, max_staleness=0,
                           **{"learner.correction": "none"}))
    assert _strip(asyn) == _strip(sync)


def test_in_process_async_april_never_trains_a_row_older_than_s(tmp_path, small_policy):
    """The bug of 0.3 end to end: async S = 1 with partial rows (a 2-token segment budget, so most rows are
    carried). Fresh rows lag exactly S; a carried row would lag S + 1 at its next step, so every one is
    dropped (charged as aborted) and no trained token is older than S. Before the fix staleness_max hit 2."""
    rows = _run(_async_cfg(tmp_path / "p", steps=4, mode="async", workers=0, max_staleness=1,
                           planner="uniform+april", planner_options={"april": {"segment_tokens": 2}}))
    steps = [r for r in rows if r["step"] > 0]
    assert len(steps) == 4 and all(r["staleness_max"] <= 1 for r in steps)
    assert _aborted(steps[-1]) > 0  # carried rows were found stale and dropped, not trained
    assert sum(r["step_tokens"] for r in steps) == steps[-1]["tokens"]  # the ledger balances
