"""Off-policy corrections: identity on-policy, hand values, M2PO minimal masking, denominators (E2)."""
import math

import pytest
import torch

from rollwise.core import registry
from rollwise.core.types import Batch, Group, Prompt, Rollout
from rollwise.learn.corrections import (CorrectionInput, ais, ais_lambda, areal_decoupled, m2po, m2po_mask, minpro,
                                        mis_seq, mis_token, tis_seq, tis_token)
from rollwise.learn.learner import Learner, LearnerConfig

CORRECTIONS = [e.name for e in registry.entries("correction")]


def ci_from(log_rho, mask=None, theta_minus_old=None):
    """pi_old = 0 offset; mu = pi_old - log_rho; pi_theta = pi_old + theta_minus_old."""
    lr = torch.as_tensor(log_rho, dtype=torch.float32)
    old = torch.full_like(lr, -1.0)
    mask = torch.ones_like(lr) if mask is None else torch.as_tensor(mask, dtype=torch.float32)
    logp = old + (0 if theta_minus_old is None else torch.as_tensor(theta_minus_old, dtype=torch.float32))
    return CorrectionInput(logp, old, old - lr, mask)


@pytest.mark.parametrize("name", CORRECTIONS)
def test_every_correction_is_identity_on_policy(name):
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(3, 5, generator=g) * 4
    mask = torch.tensor([[1., 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    w, keep = registry.get("correction", name).obj(CorrectionInput(lp.clone().requires_grad_(True), lp, lp, mask))
    assert torch.equal(w * mask, mask) and torch.equal(keep * mask, mask), name
    assert not w.requires_grad and not keep.requires_grad


def test_tis_token_and_seq_hand():
    w, keep = tis_token(ci_from([[math.log(1.5), math.log(3.0), math.log(0.2)]]))
    assert torch.allclose(w, torch.tensor([[1.5, 2.0, 0.2]])) and keep.all()
    w, _ = tis_seq(ci_from([[math.log(1.5), math.log(1.2), 9.0], [math.log(3.0), 0, 0]],
                           mask=[[1, 1, 0], [1, 1, 1]]))
    assert torch.allclose(w, torch.tensor([[1.8, 1.8, 1.0], [2.0, 2.0, 2.0]]))


def test_tis_seq_clamps_the_sum_not_each_token():
    # log-ratios +25, -24, +0.5: prod rho = e^1.5 = 4.48 -> min(4.48, 2) = 2. Clamping each token to
    # +-20 first gave e^(20 - 20 + .5) = 1.65
    w, _ = tis_seq(ci_from([[25.0, -24.0, 0.5]]), threshold=2.0)
    assert torch.allclose(w, torch.full((1, 3), 2.0))
    # the sum itself is bounded below at -20 (verl's safety bound): e^-30 -> e^-20
    w, _ = tis_seq(ci_from([[-15.0, -15.0]]))
    assert torch.allclose(w, torch.full((1, 2), math.exp(-20.0)), rtol=1e-5, atol=0)
    # token TIS still clamps per token: min(e^20, 2), e^-20, min(e^.5, 2)
    w, _ = tis_token(ci_from([[25.0, -24.0, 0.5]]))
    assert torch.allclose(w, torch.tensor([[2.0, math.exp(-20.0), math.exp(0.5)]]), rtol=1e-5, atol=0)


def test_mis_token_and_seq_hand():
    ci = ci_from([[math.log(0.4), 0.0, math.log(2.5), math.log(1.9)]])
    w, keep = mis_token(ci)  # keep 1/C <= rho <= C, C = 2
    assert keep.tolist() == [[0, 1, 0, 1]] and torch.equal(w, torch.ones(1, 4))
    w, keep = mis_token(ci, reweight=True)
    assert torch.allclose(w, torch.tensor([[0.0, 1.0, 0.0, 1.9]]))
    ci2 = ci_from([[math.log(1.5), math.log(1.5)], [math.log(1.2), math.log(0.9)]])
    _, keep = mis_seq(ci2)  # products 2.25 (rejected) and 1.08 (kept)
    assert keep.tolist() == [[0, 0], [1, 1]]
    _, keep = mis_seq(ci2, geometric=True, threshold=1.4, threshold_low=1.1)  # exp(mean): 1.5, 1.039
    assert keep.tolist() == [[0, 0], [0, 0]]
    _, keep = mis_seq(ci2, geometric=True, threshold=1.6, threshold_low=1.4)
    assert keep.tolist() == [[1, 1], [0, 0]]
    _, keep = mis_seq(ci_from(torch.zeros(2, 3)), geometric=True, threshold=1.001, threshold_low=0.999)
    assert keep.all()  # Geo-RS accepts identical policies (spec E7)


def test_areal_decoupled_cap_mask_and_clamp():
    ci = ci_from([[math.log(3.0), math.log(6.0), math.log(0.5)]])
    w, keep = areal_decoupled(ci)
    assert torch.allclose(w, torch.tensor([[3.0, 0.0, 0.5]])) and keep.tolist() == [[1, 0, 1]]
    w, keep = areal_decoupled(ci, mode="clamp")
    assert torch.allclose(w, torch.tensor([[3.0, 5.0, 0.5]])) and keep.all()


def test_m2po_hand():
    # d = log mu - log pi_prox = [-.5, -.1, -.1, 0] -> m = [.25, .01, .01, 0]; mean .0675 >= .04;
    # dropping the .25 leaves mean .0067 < .04 -> exactly one token masked
    _, keep = m2po(ci_from([[0.5, 0.1, 0.1, 0.0]]))
    assert keep.tolist() == [[0, 1, 1, 1]]
    assert m2po_mask(torch.tensor([1.0, 1.0]), 0.04).numel() == 1  # never masks everything


def test_m2po_mask_is_minimal_and_below_tau():
    g = torch.Generator().manual_seed(7)
    for _ in range(20):
        m = torch.rand(40, generator=g) ** 4 * 0.3
        tau = 0.02
        drop = m2po_mask(m, tau)
        kept = torch.ones(40, dtype=torch.bool)
        kept[drop] = False
        assert m[kept].mean() < tau
        if drop.numel():  # one fewer dropped token (the smallest dropped one back) is not enough
            back = kept.clone()
            back[drop[m[drop].argmin()]] = True
            assert m[back].mean() >= tau


def test_m2po_ignores_padding():
    _, keep = m2po(ci_from([[0.0, 5.0], [0.0, 0.0]], mask=[[1, 0], [1, 1]]))
    assert keep.tolist() == [[1, 0], [1, 1]]  # the padded 5.0 is neither counted nor dropped


def test_minpro_prefix_minimum_hand():
    # rho = pi_theta/mu along the sequence: .5, 2, .25, 1 -> c_t = 1, .5, .5, .25
    ci = ci_from(torch.zeros(1, 4), theta_minus_old=[[math.log(0.5), math.log(2), math.log(0.25), 0.0]])
    w, keep = minpro(ci)
    assert torch.allclose(w, torch.tensor([[1.0, 0.5, 0.5, 0.25]])) and keep.all()
    ci2 = ci_from(torch.zeros(1, 4), theta_minus_old=[[math.log(2), math.log(3), 0.0, -7.0]], mask=[[1, 1, 1, 0]])
    w, _ = minpro(ci2, cap=False)
    assert torch.allclose(w, torch.tensor([[1.0, 2.0, 2.0, 1.0]]))
    w, _ = minpro(ci2)
    assert torch.allclose(w, torch.ones(1, 4))


def test_ais_hand():
    ci = ci_from([[0.0, math.log(4.0)]])  # w = [1, 4]
    lam, d = ais_lambda(torch.tensor([0.0, math.log(4.0)]))
    R, S, V = 25 / 34, math.log(4) / 2, 2.25
    assert abs(d["R"] - R) < 1e-6 and abs(d["S"] - S) < 1e-6 and abs(d["V"] - V) < 1e-6
    exp_lam = (1 - math.exp(-S / 0.1)) * (1 - R) * (1 - math.exp(-V / 0.1))
    assert abs(lam - exp_lam) < 1e-6
    w, _ = ais(ci)
    assert torch.allclose(w, torch.tensor([[1.0, 1 + exp_lam]]), atol=1e-6)  # (1-l) + l min(4, 2)


# ---- learner level: masked tokens do not rescale the others (spec E2) ---------------------------

class _TablePolicy:
    """A policy whose log-probs are log_softmax of one logit vector (fast, exact)."""

    def __init__(self, vocab=8):
        self.model = torch.nn.Linear(1, vocab)
        torch.nn.init.zeros_(self.model.weight)
        with torch.no_grad():
            self.model.bias.copy_(torch.linspace(-1, 1, vocab))
        self.version = 0

    def logp_table(self):
        return torch.log_softmax(self.model.bias, 0)

    def response_logprobs(self, prompts, responses, temperature):
        lp = self.logp_table()
        out = torch.nn.utils.rnn.pad_sequence([lp[torch.tensor(r)] for r in responses], batch_first=True)
        return out, torch.zeros_like(out), None


def _batch(policy, tokens, rewards, shift=None):
    lp = policy.logp_table().detach()
    rs = []
    for i, (t, r) in enumerate(zip(tokens, rewards)):
        mu = lp[torch.tensor(t)].clone()
        if shift and i in shift:
            mu[shift[i][0]] -= shift[i][1]
        rs.append(Rollout(0, [1], torch.tensor(t), mu, "", "eos", 0, reward=r, correct=r > 0))
    return Batch([Group(Prompt(0, "", ""), rs)])


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_learner_masking_keeps_denominators(agg):
    def loss_with(correction, shift):
        pol = _TablePolicy()
        cfg = LearnerConfig(minibatches=1, correction=correction, loss_agg=agg, grad_clip=1e9)
        return Learner(pol, cfg).update(_batch(pol, [[1, 2, 3], [4, 5]], [1.0, 0.0], shift))["loss"]

    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # GRPO advantages of [1, 0]: +-0.7071
    # ratio 1, per-token loss -A: row 0 has 3 tokens at -a, row 1 two tokens at +a
    seq = agg == "seq-mean-token-mean"
    assert abs(loss_with("none", None) - ((-a + a) / 2 if seq else (-3 * a + 2 * a) / 5)) < 1e-5
    # mu of token 3 of row 0 far below pi_old: rho = e^1.5 > 2 -> MIS drops that token only, and
    # the denominators stay 3 tokens (row 0) and 5 tokens (minibatch)
    got = loss_with("mis-token", {0: (2, 1.5)})
    assert abs(got - ((-a * 2 / 3 + a) / 2 if seq else (-2 * a + 2 * a) / 5)) < 1e-5
