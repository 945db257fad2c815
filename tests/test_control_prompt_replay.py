import copy

import numpy as np
import torch

from rollwise.control.base import StepContext, build_planner
from rollwise.control.prompt_replay import PromptReplay
from rollwise.core import registry
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Batch, Group, Prompt, Rollout


def _rollout(pid, correct):
    return Rollout(prompt_id=pid, prompt_ids=[1, 2], token_ids_T=torch.arange(3), logprobs_T=torch.full((3,), -0.5),
                   text="x", finish_reason="eos", policy_version=0, reward=float(correct), correct=bool(correct))


def _group(prompt, k, n=8):
    return Group(prompt, [_rollout(prompt.id, i < k) for i in range(n)])


POOL = [Prompt(i, f"{i}+1=", str(i + 1)) for i in range(1000)]


def _ctx(step, B=8, seed=0):
    return StepContext(step, B, 8, POOL, PromptHistory(len(POOL)), Ledger(), np.random.default_rng(seed))


def _begin(pr, step, B=8, seed=0):
    """A new step's context, after the component's begin_step (as the Planner starts every step)."""
    ctx = _ctx(step, B, seed)
    pr.begin_step(ctx)
    return ctx


def _observe(pr, step, correct_by_id, seed=0):
    ctx = _ctx(step, seed=seed)
    groups = [_group(POOL[i], k) for i, k in correct_by_id.items()]
    pr.observe(groups, Batch(groups), ctx)


def _fresh(start, k):
    return POOL[start: start + k]


def test_registered():
    assert registry.get("planner", "prompt-replay").obj is PromptReplay


def test_budget_caps_at_half_batch():
    assert PromptReplay(frac=0.5).budget(32) == 16
    assert PromptReplay(frac=0.9).budget(32) == 16  # B // 2 hard cap
    assert PromptReplay(frac=0.3).budget(32) == 9  # floor(9.6)
    assert PromptReplay(frac=0.5).budget(5) == 2
    assert PromptReplay(frac=0.5).budget(1) == 0


def test_priority_is_distance_to_half_then_lower_rate():
    pr = PromptReplay(cooldown=5, cooldown_jitter=0)
    # pass rates: 0.25, 0.5, 0.625, 0.375, 0.75 (out of window), 0 and 1 (out), 0.875 (out)
    _observe(pr, 0, {10: 2, 11: 4, 12: 5, 13: 3, 14: 6, 15: 0, 16: 8, 17: 7})
    ctx = _begin(pr, 5)  # cooled down: 5 - 0 >= 5
    out = pr.select(_fresh(500, 8), 8, ctx)
    # budget 4: 0.5 (d=0), then d=0.125 -> the lower rate 0.375 first, then 0.625, then 0.25 (d=0.25)
    assert [p.id for p in out[:4]] == [11, 13, 12, 10]
    assert [p.id for p in out[4:]] == list(range(500, 508))  # fresh candidates follow
    assert all(pr.reuse[i] == 1 for i in (11, 13, 12, 10)) and 14 not in pr.reuse
    assert ctx.metrics["replayed"] == 4


def test_cooldown_without_and_with_jitter():
    pr = PromptReplay(cooldown=5, cooldown_jitter=0)
    _observe(pr, 10, {1: 4})
    assert pr.select(_fresh(500, 8), 8, _begin(pr, 14))[0].id == 500  # 14 - 10 < 5
    assert pr.select(_fresh(500, 8), 8, _begin(pr, 15))[0].id == 1

    # jitter +-max(1, round(0.2 * 5)) = +-1: each prompt's cooldown is 4, 5 or 6, all three occur
    pr = PromptReplay(cooldown=5, cooldown_jitter=0.2, max_reuse=100)
    _observe(pr, 0, {i: 4 for i in range(300)}, seed=3)
    cools = np.array([pr.cool[i] for i in range(300)])
    assert set(cools.tolist()) == {4, 5, 6}
    pr2 = PromptReplay(frac=0.5, cooldown=5, cooldown_jitter=0.2)
    pr2.load_state_dict(pr.state_dict())
    got = [p.id for p in pr2.select(_fresh(500, 600), 600, _begin(pr2, 4, B=600))[:300] if p.id < 300]
    assert sorted(got) == sorted(np.flatnonzero(cools == 4).tolist())


def test_max_reuse_and_prompt_stays_out_of_this_step():
    pr = PromptReplay(cooldown=1, cooldown_jitter=0, max_reuse=2)
    _observe(pr, 0, {7: 4})
    replayed_steps = []
    for step in range(1, 10):
        ctx = _begin(pr, step)
        out = pr.select(_fresh(500, 8), 8, ctx)
        if out[0].id == 7:
            replayed_steps.append(step)
            _observe(pr, step, {7: 4})
    assert replayed_steps == [1, 2] and pr.reuse[7] == 2
    # a prompt already rolled out in this step (a refill round) is not replayed
    pr = PromptReplay(cooldown=0, cooldown_jitter=0)
    _observe(pr, 0, {3: 4})
    ctx = _begin(pr, 1)
    ctx.groups[3] = _group(POOL[3], 4)
    assert 3 not in [p.id for p in pr.select(_fresh(500, 8), 8, ctx)]


def test_budget_is_per_step_across_refill_calls():
    pr = PromptReplay(cooldown=0, cooldown_jitter=0)
    _observe(pr, 0, {i: 4 for i in range(40)})
    ctx = _begin(pr, 1, B=8)
    first = pr.select(_fresh(500, 8), 8, ctx)
    second = pr.select(_fresh(520, 5), 5, ctx)  # a DAPO refill round in the same step
    n_replay = sum(p.id < 40 for p in first + second)
    assert n_replay == 4  # min(floor(8 * 0.5), 8 // 2)
    assert sum(p.id < 40 for p in pr.select(_fresh(540, 8), 8, _begin(pr, 2, B=8))) == 4  # next step: fresh budget


def test_composes_with_dapo_and_draws_b_prompts():
    planner = build_planner("prompt-replay+dapo", len(POOL), np.random.default_rng(0),
                            {"prompt-replay": {"cooldown": 0, "cooldown_jitter": 0}})
    pr = planner.components[0]
    _observe(pr, 0, {i: 4 for i in range(40)})
    ctx = _ctx(1, B=8)
    reqs = next(planner.plan(ctx))  # the step's first requests
    ids = [r.prompt.id for r in reqs]
    assert len(ids) == 8 and len(set(ids)) == 8 and sum(i < 40 for i in ids) == 4


def test_state_dict_round_trip_continues_identically():
    pr = PromptReplay(cooldown=3)
    rng = np.random.default_rng(0)
    _observe(pr, 0, {i: int(rng.integers(0, 9)) for i in range(60)})
    pr.select(_fresh(500, 8), 8, _begin(pr, 3))
    pr2 = PromptReplay(cooldown=3)
    pr2.load_state_dict(copy.deepcopy(pr.state_dict()))
    assert pr2.state_dict() == pr.state_dict()
    for step in range(4, 12):
        a = pr.select(_fresh(500, 8), 8, _begin(pr, step, seed=step))
        b = pr2.select(_fresh(500, 8), 8, _begin(pr2, step, seed=step))
        assert [p.id for p in a] == [p.id for p in b]
        res = {p.id: int(rng.integers(0, 9)) for p in a}
        _observe(pr, step, res, seed=step)
        _observe(pr2, step, res, seed=step)
    assert pr2.state_dict() == pr.state_dict()
