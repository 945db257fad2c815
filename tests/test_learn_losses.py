"""Policy losses and aggregations: hand values, plain PG at ratio 1, gradient checks, micro-batching."""
import math

import pytest
import torch

from rollwise.core import registry
from rollwise.learn.losses import (KL_ESTIMATORS, AggTotals, LossInput, cispo, constant, dual_clip, gpg, gspo,
                                   kl_penalty, m2po_clip, m2po_tau, no_clip, ppo_clip, seq_mean_token_mean,
                                   seq_mean_token_sum_norm, token_mean, token_sum)

LOSSES = [e.name for e in registry.entries("loss")]
LOGP_FORM = {"cispo", "gpg"}  # losses written with log pi (verl's form), not with the ratio


def _lp(log_ratio, adv, mask=None, old=None):
    log_ratio = torch.as_tensor(log_ratio, dtype=torch.float64)
    old = torch.zeros_like(log_ratio) - 1.0 if old is None else old
    logp = (old + log_ratio).clone().requires_grad_(True)
    mask = torch.ones_like(log_ratio) if mask is None else torch.as_tensor(mask, dtype=torch.float64)
    adv = torch.as_tensor(adv, dtype=torch.float64).expand_as(log_ratio)
    return LossInput(logp, old, adv, mask), logp


def _grad(loss_NT, logp, mask, agg=token_mean, **kw):
    totals = AggTotals(tokens=int(mask.sum()), seqs=mask.shape[0])
    return torch.autograd.grad(agg(loss_NT, mask, totals, **kw), logp, retain_graph=True)[0]


@pytest.mark.parametrize("name", LOSSES)
def test_every_loss_is_plain_policy_gradient_at_ratio_one(name):
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=g, dtype=torch.float64) * 3
    mask = torch.tensor([[1., 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.float64)
    adv = torch.tensor([[1.5], [-0.7], [0.3]], dtype=torch.float64).expand(3, 4)
    lp, logp = _lp(torch.zeros(3, 4), adv, mask, old=old)
    loss_NT, stats = registry.get("loss", name).obj(lp)
    assert "clipped_NT" in stats and not (stats["clipped_NT"] & (mask > 0)).any()
    for agg in (token_mean, seq_mean_token_mean):
        got = _grad(loss_NT, logp, mask, agg)
        # plain policy gradient: the same aggregation of -A * logp
        pg = torch.autograd.grad(agg(-adv * logp, mask, AggTotals(int(mask.sum()), 3)), logp)[0]
        assert torch.allclose(got * mask, pg * mask, atol=1e-10), name
    # ratio-form losses are worth -A r = -A at ratio 1; the log-prob forms (CISPO, GPG) -A log pi
    value = -adv * logp.detach() if name in LOGP_FORM else -adv
    assert torch.allclose((loss_NT * mask).detach(), value * mask)


def test_ppo_clip_hand():
    lp, logp = _lp([[math.log(1.5), math.log(0.5), math.log(0.5)]], [[1.0, 1.0, -1.0]])
    loss, st = ppo_clip(lp)
    # r=1.5, A=1 -> clipped at 1.28; r=.5, A=1 -> -.5 (unclipped side); r=.5, A=-1 -> clipped at .8
    assert torch.allclose(loss.detach(), torch.tensor([[-1.28, -0.5, 0.8]], dtype=torch.float64))
    assert st["clipped_NT"].tolist() == [[True, False, True]]
    g = torch.autograd.grad(loss.sum(), logp)[0]
    assert torch.allclose(g, torch.tensor([[0.0, -0.5, 0.0]], dtype=torch.float64))  # d(-A r)/dlogp = -A r


def test_dual_clip_hand_and_gradient():
    # A=-1, r=5: PPO gives max(5, 1.28)=5, dual clip caps at c=3 -> 3, no gradient
    # A=-1, r=2: PPO gives 2 < 3 -> 2, gradient -A r = 2;  A=+1, r=5: 1.28 as in PPO
    lp, logp = _lp([[math.log(5), math.log(2), math.log(5)]], [[-1.0, -1.0, 1.0]])
    loss, st = dual_clip(lp, clip_c=3.0)
    assert torch.allclose(loss.detach(), torch.tensor([[3.0, 2.0, -1.28]], dtype=torch.float64))
    assert st["clipped_lower_NT"].tolist() == [[True, False, False]]
    g = torch.autograd.grad(loss.sum(), logp)[0]
    assert torch.allclose(g, torch.tensor([[0.0, 2.0, 0.0]], dtype=torch.float64))
    with pytest.raises(ValueError):
        dual_clip(lp, clip_c=1.0)


def test_token_ratio_losses_clamp_the_log_ratio_at_20():
    # a stale token: log(pi/pi_old) = 60, A = -1. Unclamped, -A r = e^60 = 1e26; verl clamps log r to 20
    lp, logp = _lp([[60.0, -60.0]], [[-1.0, -1.0]])
    for fn in (ppo_clip, no_clip):
        loss, st = fn(lp)
        assert torch.allclose(loss.detach()[0, 0], torch.tensor(math.exp(20.0), dtype=torch.float64)), fn
        assert torch.allclose(st["ratio_NT"][0], torch.tensor([math.exp(20.0), math.exp(-20.0)], dtype=torch.float64))
        assert torch.autograd.grad(loss.sum(), logp)[0][0, 0] == 0  # beyond the clamp: no gradient
    loss, _ = dual_clip(lp)
    assert loss.detach()[0, 0] == 3.0  # the dual clip bounds it anyway
    # inside the bound nothing changes: log r = 19.9, A = -1 -> -A r = e^19.9 with gradient e^19.9
    lp, logp = _lp([[19.9]], [[-1.0]])
    loss, _ = no_clip(lp)
    g = torch.autograd.grad(loss.sum(), logp)[0]
    assert torch.allclose(g, torch.tensor([[math.exp(19.9)]], dtype=torch.float64))


def test_kl_estimators_hand_values_and_gradients():
    # log pi = -1, log ref = -1.5: d = log ref - log pi = -.5
    def value_grad(name, logp=-1.0, ref=-1.5):
        x = torch.tensor([[logp]], dtype=torch.float64, requires_grad=True)
        v = kl_penalty(x, torch.tensor([[ref]], dtype=torch.float64), name)
        return v.item(), torch.autograd.grad(v.sum(), x)[0].item()

    k3 = math.exp(-0.5) + 0.5 - 1
    expect = {"k1": (0.5, 1.0), "kl": (0.5, 1.0), "abs": (0.5, 1.0), "k2": (0.125, 0.5), "mse": (0.125, 0.5),
              "k3": (k3, 1 - math.exp(-0.5)), "low_var_kl": (k3, 1 - math.exp(-0.5)),
              # "+": the value of the estimator, the gradient of k2 (log pi - log ref = .5)
              "k1+": (0.5, 0.5), "kl+": (0.5, 0.5), "abs+": (0.5, 0.5), "k3+": (k3, 0.5), "low_var_kl+": (k3, 0.5)}
    assert set(expect) == set(KL_ESTIMATORS)
    for name, (v, g) in expect.items():
        got = value_grad(name)
        assert abs(got[0] - v) < 1e-12 and abs(got[1] - g) < 1e-12, (name, got)
    # k3's clamps (verl): value at most 10 (d = 5: e^5 - 6 = 142), d itself within +-20; no gradient there
    assert value_grad("k3", logp=-6.0, ref=-1.0) == (10.0, 0.0)
    assert value_grad("k3", logp=-1.0, ref=-13.0) == (10.0, 0.0)  # d = -12: 11.000006 -> 10
    v, g = value_grad("k3", logp=-1.0, ref=-11.5)  # d = -10.5: e^d + 9.5, gradient 1 - e^d
    assert abs(v - (math.exp(-10.5) + 9.5)) < 1e-12 and abs(g - (1 - math.exp(-10.5))) < 1e-12
    with pytest.raises(ValueError, match="unknown kl_estimator"):
        kl_penalty(torch.zeros(1, 1), torch.zeros(1, 1), "k4")


def test_gspo_sequence_ratio_value_and_gradient():
    # one sequence, log ratios [.2, 0, (pad)]: s = exp(mean) = exp(.1), broadcast to its tokens
    mask = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    lp, logp = _lp([[0.2, 0.0, 5.0]], [[-1.0]], mask)
    loss, st = gspo(lp)
    s = math.exp(0.1)
    assert torch.allclose(st["ratio_NT"][0, :2], torch.tensor([s, s], dtype=torch.float64))
    assert torch.allclose(loss.detach()[0, :2], torch.tensor([s, s], dtype=torch.float64))  # A<0: -A s
    # with seq-mean-token-mean the gradient is the sequence-level -A grad s_i = s / |o_i| per token
    g = _grad(loss, logp, mask, seq_mean_token_mean)
    assert torch.allclose(g[0, :2], torch.tensor([s / 2, s / 2], dtype=torch.float64))


def test_gspo_gradient_matches_sequence_level_objective():
    g0 = torch.Generator().manual_seed(3)
    mask = torch.tensor([[1., 1, 1], [1, 1, 0]], dtype=torch.float64)
    lr = torch.randn(2, 3, generator=g0, dtype=torch.float64) * 0.3
    adv = torch.tensor([[0.8], [-1.2]], dtype=torch.float64)
    lp, logp = _lp(lr, adv, mask)
    loss, _ = gspo(lp, clip_low=10.0, clip_high=10.0)  # clip inactive: the pure sequence surrogate
    got = _grad(loss, logp, mask, seq_mean_token_mean)
    # reference: J = mean_i -A_i exp(mean_t log(pi/pi_old)), differentiated directly
    logp2 = logp.detach().clone().requires_grad_(True)
    seq = ((logp2 - lp.old_logp_NT) * mask).sum(1) / mask.sum(1)
    ref = torch.autograd.grad((-adv[:, 0] * seq.exp()).mean(), logp2)[0]
    assert torch.allclose(got * mask, ref * mask, atol=1e-10)
    # and with the default tight clip, an A>0 sequence above 1+eps_h has no gradient
    lp3, logp3 = _lp([[0.1, 0.1, 0.1]], [[1.0]])
    loss3, st3 = gspo(lp3)
    assert st3["clipped_NT"].all() and torch.autograd.grad(loss3.sum(), logp3)[0].abs().max() == 0


def test_no_clip_is_unclipped_ratio():
    lp, logp = _lp([[math.log(4.0)]], [[2.0]])
    loss, _ = no_clip(lp)
    assert torch.allclose(loss.detach(), torch.tensor([[-8.0]], dtype=torch.float64))
    assert torch.allclose(torch.autograd.grad(loss.sum(), logp)[0], torch.tensor([[-8.0]], dtype=torch.float64))


def test_cispo_clips_the_detached_weight_and_keeps_every_gradient():
    # r = 1.5, A = 1: PPO clips (no gradient); CISPO weighs by sg(min(1.5, 1.28)) and keeps -1.28
    # r = .5, A = -1: lower bound .8 -> gradient +.8; r = .5, A = 1 with no lower bound -> -.5
    lr = [[math.log(1.5), math.log(0.5), math.log(0.5)]]
    lp, logp = _lp(lr, [[1.0, -1.0, 1.0]])
    loss, st = cispo(lp, clip_low=0.2, clip_high=0.28)
    g = torch.autograd.grad(loss.sum(), logp)[0]
    assert torch.allclose(g, torch.tensor([[-1.28, 0.8, -0.8]], dtype=torch.float64))
    assert torch.allclose(loss.detach(), torch.tensor([[-1.28, 0.8, -0.8]], dtype=torch.float64) * logp.detach())
    assert st["clipped_NT"].tolist() == [[True, True, True]]
    loss, st = cispo(lp)  # defaults: no lower bound (clip_low = 1), clip_high .28
    g = torch.autograd.grad(loss.sum(), logp)[0]
    assert torch.allclose(g, torch.tensor([[-1.28, 0.5, -0.5]], dtype=torch.float64))
    assert st["clipped_NT"].tolist() == [[True, False, False]]
    ppo_loss, _ = ppo_clip(lp)
    assert torch.autograd.grad(ppo_loss.sum(), logp)[0][0, 0] == 0  # what CISPO avoids


def test_gpg_loss_is_minus_a_log_pi():
    # whatever the ratio, L = -A log pi with gradient -A
    lp, logp = _lp([[3.0, -2.0]], [[0.5, -2.0]])
    loss, st = gpg(lp)
    assert torch.allclose(loss.detach(), -torch.tensor([[0.5, -2.0]], dtype=torch.float64) * logp.detach())
    assert torch.allclose(torch.autograd.grad(loss.sum(), logp)[0], torch.tensor([[-0.5, 2.0]], dtype=torch.float64))
    assert not st["clipped_NT"].any()


def test_m2po_tau_hand():
    v = torch.tensor([0.01, 0.04, 0.25], dtype=torch.float64)  # mean .1 > .04: solve mean(min(v, t2)) = .04 -> t2 = .07
    t = m2po_tau(v, 0.04)
    assert abs(t ** 2 - 0.07) < 1e-9
    assert abs(torch.minimum(v.double(), torch.tensor(t ** 2)).mean().item() - 0.04) < 1e-9
    assert m2po_tau(torch.tensor([0.01, 0.02]), 0.04) == math.inf
    assert m2po_tau(torch.tensor([]), 0.04) == math.inf


def test_m2po_clip_bounds_from_budget():
    # harmful tokens: A>0 with r>1; Delta^2 = (log r)^2 = [.01, .04, .25] -> tau = sqrt(.07)
    lr = torch.tensor([[0.1, 0.2, 0.5, -0.3]], dtype=torch.float64)
    lp, logp = _lp(lr, [[1.0, 1.0, 1.0, 1.0]])
    loss, st = m2po_clip(lp, budget=0.04, min_clip_low=0.0, min_clip_high=0.0)
    tau = math.sqrt(0.07)
    assert abs(st["clip_high"] - math.expm1(tau)) < 1e-9 and abs(st["clip_low"] - (1 - math.exp(-tau))) < 1e-9
    # e^tau = 1.304: r = e^.5 = 1.65 is clipped, the others are not
    assert st["clipped_NT"].tolist() == [[False, False, True, False]]
    _, st2 = m2po_clip(lp)  # floors: clip_high >= .5
    assert st2["clip_high"] == 0.5 and st2["clip_low"] == max(1 - math.exp(-tau), 0.3)


def test_aggregations_hand_and_microbatch_invariance():
    loss = torch.tensor([[1., 2, 0], [3, 0, 0], [4, 4, 4]])
    mask = torch.tensor([[1., 1, 0], [1, 0, 0], [1, 1, 1]])
    tot = AggTotals(tokens=6, seqs=3)
    assert torch.isclose(token_mean(loss, mask, tot), torch.tensor(18 / 6))
    assert torch.isclose(token_sum(loss, mask, tot), torch.tensor(18.0))
    assert torch.isclose(seq_mean_token_mean(loss, mask, tot), torch.tensor((1.5 + 3 + 4) / 3))
    assert torch.isclose(seq_mean_token_sum_norm(loss, mask, tot, max_len=4), torch.tensor(18 / (3 * 4)))
    assert torch.isclose(seq_mean_token_sum_norm(loss, mask, tot), torch.tensor(18 / (3 * 3)))  # padded width
    assert torch.isclose(constant(loss, mask, tot, k=2.0), torch.tensor((1.5 + 3 + 4) / 3 / 2))
    # micro-batches with the minibatch totals add up to the minibatch value
    for name in [e.name for e in registry.entries("aggregation")]:
        fn, kw = registry.get("aggregation", name).obj, ({"max_len": 8} if name == "seq-mean-token-sum-norm" else {})
        whole = fn(loss, mask, tot, **kw)
        parts = fn(loss[:2, :2], mask[:2, :2], tot, **kw) + fn(loss[2:], mask[2:], tot, **kw)
        assert torch.isclose(whole, parts), name


def test_aggregations_empty_rows_and_zero_advantage_no_nan():
    loss = torch.zeros(2, 3)
    mask = torch.tensor([[0., 0, 0], [1, 1, 0]])
    for name in [e.name for e in registry.entries("aggregation")]:
        assert torch.isfinite(registry.get("aggregation", name).obj(loss, mask, AggTotals(2, 2)))
    for name in LOSSES:
        lp, _ = _lp(torch.zeros(2, 3), torch.zeros(2, 3), mask)
        out, _ = registry.get("loss", name).obj(lp)
        assert torch.isfinite(out).all(), name


def test_loss_weight_multiplies_and_is_not_differentiated():
    lp, logp = _lp([[0.0, 0.0]], [[1.0, 1.0]])
    lp.weight_NT = torch.tensor([[2.0, 0.5]], dtype=torch.float64)
    for name in LOSSES:
        loss, _ = registry.get("loss", name).obj(lp)
        g = torch.autograd.grad(loss.sum(), logp)[0]
        assert torch.allclose(g, torch.tensor([[-2.0, -0.5]], dtype=torch.float64)), name
