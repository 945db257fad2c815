import copy

import numpy as np
import pytest
import torch

from rollwise.control.base import StepContext, build_planner
from rollwise.control.depo import DEPO, explorability
from rollwise.core import registry
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Batch, Group, Prompt, Rollout


def _rollout(pid, correct, entropy):
    return Rollout(prompt_id=pid, prompt_ids=[1, 2], token_ids_T=torch.arange(3), logprobs_T=torch.full((3,), -0.5),
                   text="x", finish_reason="eos", policy_version=0, entropy=entropy, reward=float(correct),
                   correct=bool(correct))


def _group(prompt, correct, entropy):
    return Group(prompt, [_rollout(prompt.id, c, e) for c, e in zip(correct, entropy)])


N = 8


def _ctx(seed=0):
    pool = [Prompt(i, f"{i}+1=", str(i + 1)) for i in range(N)]
    return StepContext(0, 4, 4, pool, PromptHistory(N), Ledger(), np.random.default_rng(seed))


def test_registered():
    assert registry.get("planner", "depo").obj is DEPO


def test_explorability_by_hand():
    # 2 correct (H 1.0, 2.0), 2 wrong (H 1.0, 5.0): mu = 0.5, sd = 0.5, A+ = 1, A- = -1;
    # Hbar_c = 1.5, so wrong responses with H <= 1.5 * 1.5 = 2.25 count: E = 1 + 2 + 1 = 4
    assert explorability([1, 1, 0, 0], [1.0, 2.0, 1.0, 5.0]) == pytest.approx(4.0, rel=1e-6)
    # 1 correct (H 2) of 4: mu = .25, sd = .433; A+ = .75/.433 = 1.732, A- = .25/.433 = .577;
    # wrong H (1, 3, 4) <= 1.5 * 2 = 3 -> 1 and 3 count: E = 1.732 * 2 + .577 * 4 = 5.774
    assert explorability([1, 0, 0, 0], [2.0, 1.0, 3.0, 4.0]) == pytest.approx(2 * 3 ** 0.5 + 4 / 3 ** 0.5, rel=1e-6)
    assert explorability([1, 1, 1, 1], [1.0] * 4) == pytest.approx(0.0, abs=1e-6)  # all correct
    assert explorability([0, 0, 0, 0], [1.0] * 4) == 0.0  # all wrong


def _visit(d, ctx, scores_by_id):
    """One visit per prompt whose explorability is the given value (two correct of four, H = s/2)."""
    groups = [_group(ctx.pool[i], [1, 1, 0, 0], [s / 2, s / 2, 99.0, 99.0]) for i, s in scores_by_id.items()]
    ctx.history.record(groups, 0)
    d.observe(groups, Batch(groups), ctx)


def test_epoch_zero_keeps_everything_then_prunes_lowest_scores():
    ctx = _ctx()
    d = DEPO(decay=0.25, replay_after=99)
    out = d.select(ctx.pool, N, ctx)  # epoch 0: no pruning
    assert [p.id for p in out] == list(range(N))
    assert d.allocate(out, [4] * N, ctx) == [4] * N
    _visit(d, ctx, {i: float(i) for i in range(N)})
    assert d.score(5) == pytest.approx(5.0, rel=1e-6)
    # epoch 1: rho = 1 - 0.25 = 0.75 -> keep floor(0.75 * 8) = 6, prune the two lowest scores (0, 1)
    out = d.select(ctx.pool, N, ctx)
    ns = d.allocate(out, [4] * N, ctx)
    kept = {p.id for p, n in zip(out, ns) if n > 0}
    assert kept == {2, 3, 4, 5, 6, 7}
    assert [p.id for p in out[:6]] == [7, 6, 5, 4, 3, 2]  # score descending
    assert ctx.metrics["skipped"] == 2 and ctx.metrics["depo_rho"] == 0.75


def test_ties_prefer_least_explored_and_fill_multiple():
    ctx = _ctx()
    d = DEPO(decay=0.5, replay_after=99, fill_multiple=4)
    d.select(ctx.pool, N, ctx)
    _visit(d, ctx, {i: 1.0 for i in range(N)})
    ctx.history.visits[[0, 1, 2]] += 5  # explored more often
    # epoch 1: rho = 0.5 -> keep 4 of 8 equal scores: the four least explored (3..7 minus one)
    out = d.select(ctx.pool, N, ctx)
    ns = d.allocate(out, [4] * N, ctx)
    kept = [p.id for p, n in zip(out, ns) if n > 0]
    assert len(kept) == 4 and not {0, 1, 2} & set(kept)
    d2 = DEPO(decay=0.25, replay_after=99, fill_multiple=4)  # keep 6 -> filled up to 8
    d2.seen = N
    d2.scores = {i: [float(i)] for i in range(N)}
    out = d2.select(ctx.pool, N, ctx)
    assert sum(n > 0 for n in d2.allocate(out, [4] * N, ctx)) == 8


def test_pruned_prompt_is_replayed_after_streak():
    ctx = _ctx()
    d = DEPO(decay=0.5, replay_after=2)
    d.seen = N  # epoch 1
    d.scores = {i: [float(i)] for i in range(N)}
    out = d.select(ctx.pool, N, ctx)
    ns = d.allocate(out, [4] * N, ctx)
    assert {p.id for p, n in zip(out, ns) if n == 0} == {0, 1, 2, 3}
    assert all(d.pruned_streak[i] == 1 for i in range(4))
    d.seen = N  # same epoch again
    out = d.select(ctx.pool, N, ctx)
    ns = d.allocate(out, [4] * N, ctx)
    assert all(n > 0 for n in ns)  # pruned twice in a row -> replayed, score gets refreshed
    assert ctx.metrics["depo_replayed"] == 4 and d.pruned_streak == {}


def test_score_window_is_last_k_visits():
    ctx = _ctx()
    d = DEPO(history_k=2)
    for s in (10.0, 2.0, 4.0):
        _visit(d, ctx, {0: s})
    assert d.scores[0] == pytest.approx([2.0, 4.0]) and d.score(0) == pytest.approx(3.0)


def test_planner_drops_pruned_prompts():
    pool_n = 64
    ctx = StepContext(0, 16, 4, [Prompt(i, f"{i}+1=", "x") for i in range(pool_n)], PromptHistory(pool_n),
                      Ledger(), np.random.default_rng(0))
    planner = build_planner("depo", pool_n, ctx.rng, {"depo": {"decay": 0.5, "replay_after": 99}})
    d = planner.components[0]
    d.seen = pool_n
    d.scores = {i: [float(i)] for i in range(pool_n)}
    reqs = next(planner.plan(ctx))  # the step's first requests
    assert len(reqs) == 8  # half the batch pruned before rollout
    assert all(r.n == 4 for r in reqs)


def test_state_dict_round_trip():
    ctx = _ctx()
    d = DEPO()
    d.select(ctx.pool, N, ctx)
    _visit(d, ctx, {i: float(i) for i in range(N)})
    d.select(ctx.pool, N, ctx)
    d2 = DEPO()
    d2.load_state_dict(copy.deepcopy(d.state_dict()))
    assert d2.state_dict() == d.state_dict()
    a = d.select(ctx.pool, N, ctx)
    b = d2.select(ctx.pool, N, ctx)
    assert [p.id for p in a] == [p.id for p in b]
    assert d.allocate(a, [4] * N, ctx) == d2.allocate(b, [4] * N, ctx)
