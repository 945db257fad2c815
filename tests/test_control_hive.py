import copy

import numpy as np
import pytest
import torch

from rollwise.control.base import Planner, StepContext
from rollwise.control.hive import HIVE
from rollwise.core import registry
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Batch, Group, Prompt, Rollout
from rollwise.run.driver import StepDriver


def _rollout(pid, correct, entropy=1.0):
    return Rollout(prompt_id=pid, prompt_ids=[1, 2], token_ids_T=torch.arange(3), logprobs_T=torch.full((3,), -0.5),
                   text="x", finish_reason="eos", policy_version=0, entropy=entropy, reward=float(correct),
                   correct=bool(correct))


def _group(prompt, k, n=8, entropy=1.0):
    return Group(prompt, [_rollout(prompt.id, i < k, entropy) for i in range(n)])


class FakePolicy:
    """prompt_stats -> (prompt entropy from a table, dummy embeddings); one char = one token."""

    def __init__(self, ent):
        self.ent = ent
        self.calls = 0

    def encode(self, text):
        return list(range(len(text)))

    def prompt_stats(self, texts):
        self.calls += 1
        ids = [int(t.split("+")[0]) for t in texts]
        return np.array([self.ent.get(i, 1.0) for i in ids]), np.zeros((len(texts), 4))


def _ctx(N=20, seed=0, ent=None):
    """ctx.prompt_stats is the policy's, served by the step driver (which charges the prompt tokens)."""
    pool = [Prompt(i, f"{i}+1=", str(i + 1)) for i in range(N)]
    policy, ledger = FakePolicy(ent or {}), Ledger()
    ctx = StepContext(0, 4, 8, pool, PromptHistory(N), ledger, np.random.default_rng(seed), policy)
    ctx.prompt_stats = StepDriver(None, ledger, None, policy=policy).prompt_stats
    return ctx


def test_registered():
    e = registry.get("planner", "hive")
    assert e.obj is HIVE and "INF" in e.provenance


def test_stage1_keeps_unvisited_and_top_rho_by_p1p_times_entropy():
    ctx = _ctx()
    pool = ctx.pool
    # visited: 0: p=0.5 H=1 (u=.25), 1: p=0.5 H=0.2 (u=.05), 2: p=1 (u=0), 3: p=0.25 H=1 (u=.1875)
    groups = [_group(pool[0], 4, entropy=1.0), _group(pool[1], 4, entropy=0.2),
              _group(pool[2], 8, entropy=1.0), _group(pool[3], 2, entropy=1.0)]
    ctx.history.record(groups, 0)
    kept = HIVE(rho1=0.5).stage1(pool[:6], ctx)
    assert [p.id for p in kept] == [0, 3, 4, 5]  # top ceil(0.5 * 4) = 2 by u, plus the two unvisited
    assert ctx.metrics["skipped"] == 2
    kept = HIVE(rho1=1.0, p_lo=0.1, p_hi=0.9).stage1(pool[:6], ctx)
    assert [p.id for p in kept] == [0, 1, 3, 4, 5]  # the window drops p = 1


def test_stage2_ranks_by_prompt_entropy_and_drops_stale():
    ctx = _ctx(ent={0: 0.5, 1: 2.0, 2: 1.0, 3: 1.5})
    h = HIVE(delta=0.2)
    h.h_prompt = {3: 2.0, 2: 1.1}  # prompt 3 fell 25% since its last visit (stale), prompt 2 only 9%
    out = h.stage2(ctx.pool[:4], ctx)
    assert [p.id for p in out] == [1, 2, 0]
    assert ctx.metrics["hive_stale"] == 1
    assert ctx.ledger.scoring_tokens == sum(len(p.text) for p in ctx.pool[:4])  # the scoring prefill is charged
    # observe stores the entropy measured this step for the prompts that were rolled out
    groups = [_group(ctx.pool[1], 4)]
    h.observe(groups, Batch(groups), ctx)
    assert h.h_prompt[1] == 2.0 and h.h_prompt[3] == 2.0 and h._pending == {}


def test_select_needs_a_policy():
    ctx = _ctx()
    ctx.policy, ctx.prompt_stats = None, None
    with pytest.raises(RuntimeError):
        HIVE().select(ctx.pool[:3], 3, ctx)
    # a host without the policy is refused up front, by name
    planner = Planner([HIVE()], len(ctx.pool), np.random.default_rng(0))
    with pytest.raises(ValueError, match="hive"):
        planner.require("a host", sampling=True, policy=False, refill=True)
    planner.require("a host", policy=True)


def test_ema_pass_rate():
    ctx = _ctx()
    h = HIVE(ema=0.5)
    for k in (8, 0):
        g = [_group(ctx.pool[0], k)]
        ctx.history.record(g, 0)
        h.observe(g, Batch(g), ctx)
    assert h.p_ema[0] == pytest.approx(0.5)  # 1.0 then 0.5 * 1.0 + 0.5 * 0.0
    np.testing.assert_allclose(h._pass_rate(np.array([0]), ctx), [0.5])


def test_state_dict_round_trip():
    ctx = _ctx(ent={i: 0.1 * i for i in range(20)})
    h = HIVE(ema=0.7)
    g = [_group(ctx.pool[i], i % 9) for i in range(10)]
    ctx.history.record(g, 0)
    h.select(ctx.pool, 8, ctx)
    h.observe(g, Batch(g), ctx)
    h.select(ctx.pool[10:], 4, ctx)  # pending entropies mid-step
    h2 = HIVE(ema=0.7)
    h2.load_state_dict(copy.deepcopy(h.state_dict()))
    assert h2.state_dict() == h.state_dict()
    c1, c2 = _ctx(seed=3, ent={i: 0.1 * i for i in range(20)}), _ctx(seed=3, ent={i: 0.1 * i for i in range(20)})
    for c in (c1, c2):
        c.history.record(g, 0)
    assert [p.id for p in h.select(c1.pool, 8, c1)] == [p.id for p in h2.select(c2.pool, 8, c2)]
