import copy

import numpy as np
import pytest
import torch

from rollwise.control.base import StepContext, build_planner
from rollwise.control.greso import GRESO
from rollwise.core import registry
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Batch, Group, Prompt, Rollout


def _rollout(pid, correct):
    return Rollout(prompt_id=pid, prompt_ids=[1, 2], token_ids_T=torch.arange(3), logprobs_T=torch.full((3,), -0.5),
                   text="x", finish_reason="eos", policy_version=0, reward=float(correct), correct=bool(correct))


def _group(prompt, k, n=8):
    return Group(prompt, [_rollout(prompt.id, i < k) for i in range(n)])


def _ctx(N=100, B=4, step=0, seed=0):
    pool = [Prompt(i, f"{i}+1=", str(i + 1)) for i in range(N)]
    return StepContext(step, B, 8, pool, PromptHistory(N), Ledger(), np.random.default_rng(seed))


def test_registered():
    e = registry.get("planner", "greso")
    assert e.obj is GRESO and e.provenance == "CODE+INF"


def test_keep_probability_formula():
    g = GRESO(p_easy=0.5, p_hard=0.8)
    kp = g.keep_probability(np.array([0, 1, 3, 10, 0, 0]), np.array([0, 0, 0, 0, 1, 2]))
    np.testing.assert_allclose(kp, [1.0, 0.5, 0.125, 0.01, 0.8, 0.64])  # 0.5**10 < 0.01 -> floor


def test_skip_rate_matches_1_minus_max_pz_floor():
    N = 40000
    ctx = _ctx(N=N, seed=123)
    h = ctx.history
    h.visits[:] = 1
    cls = np.arange(N) // 8000  # 5 classes of 8000 prompts
    h.easy_streak[cls == 1] = 1
    h.easy_streak[cls == 2] = 2
    h.hard_streak[cls == 3] = 1
    h.easy_streak[cls == 4] = 9  # 0.5**9 = 0.00195 -> floor 0.01
    g = GRESO(p_easy=0.5, p_hard=0.8)
    kept = g.select(ctx.pool, N, ctx)
    kept_ids = np.array([p.id for p in kept])
    frac = np.bincount(cls[kept_ids], minlength=5) / 8000
    assert frac[0] == 1.0  # z = 0 never skips
    np.testing.assert_allclose(frac[1:], [0.5, 0.25, 0.8, 0.01], atol=0.015)
    assert ctx.metrics["skipped"] == N - len(kept)
    assert g._active


def test_seeded_rng_is_reproducible():
    ctx1, ctx2 = _ctx(seed=7), _ctx(seed=7)
    for c in (ctx1, ctx2):
        c.history.visits[:] = 1
        c.history.easy_streak[:50] = 1
    a = [p.id for p in GRESO().select(ctx1.pool, 100, ctx1)]
    b = [p.id for p in GRESO().select(ctx2.pool, 100, ctx2)]
    assert a == b and len(a) < 100


def test_p_updates_easy_and_hard_targets():
    ctx = _ctx()
    pool = ctx.pool
    g = GRESO(p_easy=0.5, p_hard=0.5, target_zero_variance=0.25)
    # 10 groups: 1 all-correct (0.1 >= 0.25/3 = 0.083) and 1 all-wrong (0.1 < 2*0.25/3 = 0.167)
    groups = [_group(pool[0], 8), _group(pool[1], 0)] + [_group(pool[i], 4) for i in range(2, 10)]
    g._active = True
    g.observe(groups, Batch(groups), ctx)
    assert g.p_easy == pytest.approx(0.49) and g.p_hard == pytest.approx(0.51)
    # 0 all-correct, 2 all-wrong of 10: easy goes up, hard goes down
    groups = [_group(pool[0], 0), _group(pool[1], 0)] + [_group(pool[i], 3) for i in range(2, 10)]
    g._active = True
    g.observe(groups, Batch(groups), ctx)
    assert g.p_easy == pytest.approx(0.50) and g.p_hard == pytest.approx(0.50)


def test_p_not_updated_in_epoch_zero_and_clipped():
    ctx = _ctx()
    g = GRESO(p_easy=0.95, p_hard=0.05)
    groups = [_group(ctx.pool[i], 4) for i in range(8)]
    g.select(ctx.pool[:8], 8, ctx)  # no candidate has a trace: epoch 0
    g.observe(groups, Batch(groups), ctx)
    assert (g.p_easy, g.p_hard) == (0.95, 0.05)
    g._active = True
    g.observe(groups, Batch(groups), ctx)  # no zero-variance groups: both p go up, clipped at 0.95
    assert g.p_easy == 0.95 and g.p_hard == pytest.approx(0.06)


def test_dynamic_sampling_accept_and_refill():
    ctx = _ctx()
    g = GRESO()
    assert g.refill and not g.accept(_group(ctx.pool[0], 8), ctx) and g.accept(_group(ctx.pool[0], 3), ctx)
    g2 = GRESO(dynamic_sampling=False)
    assert not g2.refill and g2.accept(_group(ctx.pool[0], 8), ctx)
    planner = build_planner("greso", 100, np.random.default_rng(0), {"greso": {"max_rounds": 3}})
    assert planner.components[0].max_rounds == 3


def test_planner_skips_easy_prompts():
    ctx = _ctx(N=200, B=10, seed=1)
    ctx.history.visits[:] = 1
    ctx.history.easy_streak[:100] = 20  # keep prob 0.01
    planner = build_planner("greso", 200, ctx.rng)
    reqs = next(planner.plan(ctx))  # the step's first requests
    assert len(reqs) == 10
    assert sum(r.prompt.id < 100 for r in reqs) <= 1


def test_state_dict_round_trip():
    ctx = _ctx()
    g = GRESO()
    ctx.history.visits[:] = 1
    g.select(ctx.pool, 10, ctx)
    groups = [_group(ctx.pool[i], 8) for i in range(10)]
    g.observe(groups, Batch(groups), ctx)
    g._active = True
    s = copy.deepcopy(g.state_dict())
    g2 = GRESO()
    g2.load_state_dict(s)
    assert g2.state_dict() == g.state_dict()
    ctx.history.easy_streak[:50] = 2
    c1, c2 = _ctx(seed=5), _ctx(seed=5)
    for c in (c1, c2):
        c.history.visits[:] = 1
        c.history.easy_streak[:50] = 2
    assert [p.id for p in g.select(c1.pool, 100, c1)] == [p.id for p in g2.select(c2.pool, 100, c2)]
