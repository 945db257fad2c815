import copy

import numpy as np
import pytest
import torch

from rollwise.control.base import StepContext, build_planner
from rollwise.control.dots import DOTS, predict_pass_rate
from rollwise.core import registry
from rollwise.core.history import PromptHistory
from rollwise.core.ledger import Ledger
from rollwise.core.types import Batch, Group, Prompt, Rollout
from rollwise.run.driver import StepDriver

from fakes import Engine, drive

N = 300


def _true_rate(i):
    return (0.0, 0.5, 1.0)[i % 3]  # three clusters of prompts


def _rollout(pid, correct, purpose="train", version=0):
    return Rollout(prompt_id=pid, prompt_ids=[1, 2], token_ids_T=torch.arange(3) + pid,
                   logprobs_T=torch.full((3,), -0.5 - pid / 1000), text="x", finish_reason="eos",
                   policy_version=version, purpose=purpose, reward=float(correct), correct=bool(correct))


def _group(prompt, k, n=8, version=0):
    return Group(prompt, [_rollout(prompt.id, i < k, version=version) for i in range(n)])


class FakePolicy:
    """Embeddings: one direction per cluster (+ a common offset and a little noise)."""

    def __init__(self):
        rng = np.random.default_rng(0)
        self.noise = rng.normal(0, 0.05, (N, 8))
        self.calls = 0

    def encode(self, text):
        return list(text)

    def prompt_stats(self, texts):
        self.calls += 1
        ids = [int(t.split("+")[0]) for t in texts]
        emb = np.full((len(ids), 8), 3.0)
        for r, i in enumerate(ids):
            emb[r, i % 3] += 1.0
        return np.zeros(len(ids)), emb + self.noise[ids]


POOL = [Prompt(i, f"{i}+1=", str(i + 1)) for i in range(N)]


def _ctx(step=0, B=8, seed=0, policy=None):
    """(ctx, engine): a scripted engine with the cluster pass rates (a group of n = 8 of a 0.5 prompt
    has 4 correct, as the old sampler's), and ctx.prompt_stats served by the step driver, which
    charges the prompt tokens."""
    ledger = Ledger()
    policy = policy or FakePolicy()
    engine = Engine({i: _true_rate(i) for i in range(N)})
    ctx = StepContext(step, B, 8, POOL, PromptHistory(N), ledger, np.random.default_rng(seed), policy)
    ctx.prompt_stats = StepDriver(engine, ledger, None, policy=policy).prompt_stats
    return ctx, engine


def train_requests(planner, ctx, engine):
    """Run the step's plan until it asks for train rollouts (its profiles generated through the
    driver by `engine`): the first round's Requests."""
    driver = StepDriver(engine, ctx.ledger, None)
    plan = planner.plan(ctx)
    reqs = next(plan)
    while not all(q.purpose == "train" for q in reqs):
        reqs = plan.send(driver.generate(reqs))
    return reqs


def test_registered():
    assert registry.get("planner", "dots").obj is DOTS


def test_predictor_recovers_cluster_pass_rates():
    pol = FakePolicy()
    ref = list(range(0, 30))
    _, e_ref = pol.prompt_stats([POOL[i].text for i in ref])
    _, e_q = pol.prompt_stats([POOL[i].text for i in range(100, 160)])
    y = np.array([_true_rate(i) for i in ref])
    p = predict_pass_rate(e_q, e_ref, y, tau_att=0.1)
    truth = np.array([_true_rate(i) for i in range(100, 160)])
    assert np.abs(p - truth).max() < 0.1


def test_rank_is_near_greedy_closest_to_alpha():
    d = DOTS(tau=1e-3)
    order = d.rank(np.array([0.0, 0.9, 0.45, 1.0, 0.6]), np.random.default_rng(0))
    assert order.tolist()[:3] == [2, 4, 1]
    # a large tau is close to uniform
    firsts = [DOTS(tau=100.0).rank(np.array([0.0, 0.5]), np.random.default_rng(s))[0] for s in range(400)]
    assert 0.4 < np.mean(firsts) < 0.6


def test_select_profiles_reference_every_mu_steps_and_prefers_medium():
    d = DOTS(mu=2, ref_size=30, sigma=1.0)
    pol = FakePolicy()
    counts = []
    for step in range(5):
        ctx, eng = _ctx(step=step, policy=pol)
        d.begin_step(ctx)
        out = drive(d.select(POOL[step * 40: step * 40 + 32], 8, ctx), eng, ctx)
        assert all(_true_rate(p.id) == 0.5 for p in out[:8])  # the medium cluster comes first
        counts.append(len(eng.requests))
        assert all(r.purpose == "profile" for r in eng.requests)
        assert ctx.ledger.count_rollouts("profile") == 8 * len(eng.requests)
        assert ctx.ledger.scoring_tokens > 0  # the profile prefill is charged as prompt scoring
    assert counts == [30, 0, 30, 0, 30]  # a new reference set every mu = 2 steps


def test_replay_allocate_finish_observe():
    d = DOTS(mu=100, ref_size=30, sigma=0.5, buffer_size=8)
    ctx, eng = _ctx(step=0, B=8)
    d.begin_step(ctx)
    # step 0: empty buffer -> all 8 prompts fresh
    out = drive(d.select(POOL[:32], 8, ctx), eng, ctx)[:8]
    assert d.allocate(out, [8] * 8, ctx) == [8] * 8
    fresh = [_group(p, 4) for p in POOL[40:46]] + [_group(POOL[46], 8), _group(POOL[47], 0)]
    for g in fresh:
        ctx.groups[g.prompt.id] = g
    assert d.finish(list(ctx.groups.values()), ctx) == list(ctx.groups.values())
    d.observe(list(ctx.groups.values()), Batch(fresh), ctx)
    # zero-variance groups never enter the buffer (the official code's commented-out filter);
    # trimmed to buffer_size - sigma * B = 4 newest
    assert [g.prompt.id for g in d.buffer] == [42, 43, 44, 45]
    # step 1: 4 replay slots -> the last 4 selected prompts get n = 0 and finish appends 4 old groups
    ctx, eng = _ctx(step=1, B=8)
    d.begin_step(ctx)
    out = drive(d.select(POOL[100:132], 8, ctx), eng, ctx)[:8]
    ns = d.allocate(out, [8] * 8, ctx)
    assert ns == [8] * 4 + [0] * 4
    fresh = [_group(p, 4, version=1) for p in out[:4]]
    for g in fresh:
        ctx.groups[g.prompt.id] = g
    groups = d.finish(list(ctx.groups.values()), ctx)
    assert len(groups) == 8 and {g.prompt.id for g in groups[:4]} == {42, 43, 44, 45}
    assert all(r.policy_version == 0 for g in groups[:4] for r in g.rollouts)  # mu kept as generated
    d.observe(list(ctx.groups.values()), Batch(groups), ctx)
    assert [g.prompt.id for g in d.buffer] == [p.id for p in out[:4]]  # replayed groups not re-added


def test_replay_never_duplicates_a_fresh_prompt_and_refill_rounds_are_fresh():
    d = DOTS(mu=100, ref_size=30, sigma=0.5, buffer_size=8)
    d.buffer = [_group(POOL[i], 4) for i in (1, 4, 7, 1)]
    ctx, _ = _ctx(B=8)
    prompts = [POOL[i] for i in (4, 10, 13, 16, 19, 22, 25, 28)]
    ns = d.allocate(prompts, [8] * 8, ctx)
    assert ns == [8] * 6 + [0] * 2  # only prompts 1 and 7 are replayable (4 is fresh this step)
    groups = d.finish([_group(p, 4) for p in prompts[:6]], ctx)
    assert sorted(g.prompt.id for g in groups[:2]) == [1, 7]
    assert groups[[g.prompt.id for g in groups[:2]].index(1)] is d.buffer[3]  # the latest copy
    ctx.groups[4] = _group(POOL[4], 4)
    assert d.allocate(prompts, [8] * 8, ctx) == [8] * 8  # a refill round: no replay slots


def test_planner_with_replay_draws_sigma_b_fresh():
    planner = build_planner("dots", N, np.random.default_rng(0), {"dots": {"ref_size": 30}})
    d = planner.components[0]
    d.buffer = [_group(POOL[i], 4) for i in range(200, 216)]
    ctx, eng = _ctx(B=8)
    reqs = train_requests(planner, ctx, eng)
    assert [len(sub) for sub in eng.submitted] == [30]  # the reference set, then the train round
    assert len(reqs) == 4 and all(r.n == 8 for r in reqs)


def test_state_dict_round_trip_with_buffer():
    d = DOTS(mu=2, ref_size=30)
    ctx, eng = _ctx()
    d.begin_step(ctx)
    drive(d.select(POOL[:32], 8, ctx), eng, ctx)
    d.buffer = [_group(POOL[i], 3, version=i) for i in range(5)]
    s = copy.deepcopy(d.state_dict())
    for b in s["buffer"]:
        assert isinstance(b["rollouts"][0]["token_ids_T"], np.ndarray)  # plain numpy, no tensors
    d2 = DOTS(mu=2, ref_size=30)
    d2.load_state_dict(s)
    assert d2.ref_ids == d.ref_ids and d2.ref_y == d.ref_y and d2.age == d.age
    for g1, g2 in zip(d.buffer, d2.buffer):
        assert g1.prompt == g2.prompt and g1.n == g2.n
        for r1, r2 in zip(g1.rollouts, g2.rollouts):
            assert torch.equal(r1.token_ids_T, r2.token_ids_T) and r2.token_ids_T.dtype == torch.long
            assert torch.equal(r1.logprobs_T, r2.logprobs_T)
            assert (r1.correct, r1.policy_version, r1.prompt_ids) == (r2.correct, r2.policy_version, r2.prompt_ids)
    pol = FakePolicy()
    ca, ea = _ctx(step=1, seed=4, policy=pol)
    cb, eb = _ctx(step=1, seed=4, policy=pol)
    d.begin_step(ca)
    d2.begin_step(cb)
    a = drive(d.select(POOL[50:82], 8, ca), ea, ca)
    b = drive(d2.select(POOL[50:82], 8, cb), eb, cb)
    assert ea.requests == eb.requests == []  # age 1 < mu = 2 in both: no new reference set
    assert [p.id for p in a] == [p.id for p in b]
