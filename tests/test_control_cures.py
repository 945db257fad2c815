"""CurES: Beta posterior, sampling weights (fixed vs as released), quotas ∝ sigma, lazy init."""
import pickle

import numpy as np
import pytest
import torch

from rollwise.control.base import Planner
from rollwise.control.cures import CurES, posterior_mean, quotas, sampling_logits
from rollwise.core.types import Batch, Rollout

from fakes import make_sampled_ctx


def test_beta_posterior_mean():
    # Beta(Accepted + 1, All - Accepted + 1): mean (A + 1)/(All + 2)
    assert posterior_mean(3, 4) == pytest.approx(4 / 6)
    assert posterior_mean(0, 0) == pytest.approx(0.5)
    assert posterior_mean([0, 4], [4, 4]).tolist() == pytest.approx([1 / 6, 5 / 6])


def test_sampling_weights_fixed_and_as_released():
    acc, tot = np.array([2, 0, 4]), np.array([4, 4, 4])  # p_hat = 1/2, 1/6, 5/6
    lg = sampling_logits(acc, tot, tau=0.1, alpha_temperature=False)
    assert lg[0] == pytest.approx(5.0)  # sqrt(.25) / .1
    assert lg[1] == pytest.approx(np.sqrt(5 / 36) / 0.1) and lg[1] == pytest.approx(lg[2])
    # the release: t_x = (A + 1) / 0.01 -> weights uniform within 0.5% (the bug the spec flags)
    rel = np.exp(sampling_logits(acc, tot, tau=100.0, alpha_temperature=True))
    assert rel.max() / rel.min() < 1.005
    assert sampling_logits([2], [4], 100.0, True)[0] == pytest.approx(0.5 / 300)


def test_quotas_proportional_to_sigma():
    p = np.array([0.5, 0.5, 0.1, 0.9])  # sigma = .5 .5 .3 .3, sum 1.6
    assert quotas(p, 32, 1, 100).tolist() == [10, 10, 6, 6]
    assert quotas(p, 32, 7, 9).tolist() == [9, 9, 7, 7]  # clip [n_lo, n_hi]


def test_select_lazy_profiles_and_prefers_medium():
    rates = {0: 0.5, 1: 0.0, 2: 1.0, 3: 0.5}
    ctx, eng = make_sampled_ctx(rates, B=2)
    c = CurES(init_rollouts=4, tau=0.01)
    out = c.select(ctx.pool, 2, ctx)
    assert ctx.ledger.rollouts["profile"] == 16 and ctx.ledger.rollouts["train"] == 0
    assert c.total.tolist() == [4, 4, 4, 4] and c.accepted.tolist() == [2, 0, 4, 2]
    assert {p.id for p in out[:2]} == {0, 3}  # p_hat = .5 beats 1/6 and 5/6 by exp(20)
    out = c.select(ctx.pool, 2, ctx)  # seen prompts are not profiled again
    assert ctx.ledger.rollouts["profile"] == 16
    # weighted, not greedy: with tau = 1 the others come first now and then
    c1 = CurES(init_rollouts=0, tau=1.0)
    c1._ensure(4)
    c1.accepted[:], c1.total[:] = [2, 0, 4, 2], [4, 4, 4, 4]
    firsts = {c1.select(ctx.pool, 1, ctx)[0].id for _ in range(200)}
    assert firsts == {0, 1, 2, 3}


def test_planner_step_allocates_quotas_and_counts():
    rates = {0: 0.5, 1: 0.0, 2: 1.0, 3: 0.5, 4: 0.25, 5: 0.75}
    ctx, eng = make_sampled_ctx(rates, B=3, n=8)
    c = CurES()
    planner = Planner([c], 6, np.random.default_rng(0))
    reqs = planner.start(ctx)
    assert len(reqs) == 3
    assert ctx.ledger.rollouts["profile"] == 4 * 6  # oversample 2 -> all 6 candidates profiled
    ns = [q.n for q in reqs]
    p_hat = posterior_mean(c.accepted[[q.prompt.id for q in reqs]], c.total[[q.prompt.id for q in reqs]])
    assert ns == quotas(p_hat, 24, 2, 32).tolist()
    groups = eng(reqs)
    before = c.total.copy()
    c.observe(groups, Batch(groups), ctx)
    for g in groups:
        assert c.total[g.prompt.id] == before[g.prompt.id] + g.n


def test_state_dict_round_trip():
    ctx, _ = make_sampled_ctx({i: 0.5 for i in range(5)}, B=2)
    c = CurES()
    c.select(ctx.pool, 2, ctx)
    s = pickle.loads(pickle.dumps(c.state_dict()))
    d = CurES()
    d.load_state_dict(s)
    assert np.array_equal(d.accepted, c.accepted) and np.array_equal(d.total, c.total)


def test_grad_sigma_formula_hand_computed():
    from rollwise.control.cures import grad_sigma
    # a = b = 1/2, E[g_c^2] = 5, E[g_w^2] = 4, equal means: .5*.25*5 + .25*.5*4 = 1.125
    assert grad_sigma([1, 1, 0, 0], [1.0, 3.0, 2.0, 2.0]) == pytest.approx(np.sqrt(1.125))
    # equal norms g: sigma = sqrt(a b) g (the Bernoulli proxy)
    assert grad_sigma([1, 0, 0, 0], [2.0] * 4) == pytest.approx(np.sqrt(0.25 * 0.75) * 2.0)
    assert grad_sigma([0, 0, 0, 0], [1.0] * 4) == 0.0  # a = 0 -> sigma = 0, as in the code


class FakePolicy:
    """log p(y_t | y_{t-1}) = log_softmax(head(wte(y_{t-1}))): enough for per-response gradients."""
    kind = "tiny"

    def __init__(self):
        torch.manual_seed(0)
        self.model = torch.nn.Module()
        self.model.wte = torch.nn.Embedding(10, 4)
        self.model.head = torch.nn.Linear(4, 10)

    def response_logprobs(self, prompts, responses, temperature=1.0):
        rows = []
        for p, r in zip(prompts, responses):
            seq = torch.tensor(p + r)
            lp = torch.log_softmax(self.model.head(self.model.wte(seq[:-1])), -1)
            rows.append(lp.gather(-1, seq[1:, None]).squeeze(-1)[len(p) - 1:])
        T = max(len(x) for x in rows)
        logp = torch.stack([torch.nn.functional.pad(x, (0, T - len(x))) for x in rows])
        mask = torch.stack([torch.nn.functional.pad(torch.ones(len(x)), (0, T - len(x))) for x in rows])
        return logp, torch.zeros_like(mask), mask


def test_grad_mode_measures_sigma_at_profiling():
    from rollwise.control.cures import response_grad_norms
    pol = FakePolicy()
    r = Rollout(0, [1, 2], torch.tensor([3, 4]), torch.zeros(2), "x", "eos", 0, "train")
    n = response_grad_norms(pol, [r], "wte")[0]
    seq = torch.tensor([1, 2, 3, 4])
    lp = torch.log_softmax(pol.model.head(pol.model.wte(seq[:-1])), -1).gather(-1, seq[1:, None]).squeeze(-1)
    (g,) = torch.autograd.grad(-lp[1:].sum(), [pol.model.wte.weight])
    assert n == pytest.approx(float(g.norm()), rel=1e-5) and n > 0
    rates = {0: 0.5, 1: 0.25, 2: 0.0, 3: 1.0}
    ctx, eng = make_sampled_ctx(rates, B=2)
    ctx.policy = pol
    c = CurES(sigma="grad")
    c.select(ctx.pool, 2, ctx)
    assert not np.isnan(c.sigma).any() and c.sigma[2] == 0.0 and c.sigma[3] == 0.0 and c.sigma[0] > 0
    ns = c.allocate(ctx.pool, [8] * 4, ctx)
    s = c.sigma.astype(np.float64)
    assert ns == np.clip(np.round(32 * s / s.sum()), 2, 32).astype(int).tolist()
    d = CurES(sigma="grad")
    d.load_state_dict(pickle.loads(pickle.dumps(c.state_dict())))
    assert np.array_equal(d.sigma, c.sigma)
