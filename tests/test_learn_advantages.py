"""Advantage estimators: hand-computed cases from the spec, group properties, degenerate groups."""
import math

import pytest
import torch

from rollwise.core import registry
from rollwise.learn.advantages import (AdvInput, BetaBaseline, fisher_two_sided, gapo, gd2po, gpg, grpo, ktae,
                                       mc_grpo, mssr, pvpo, reinforce_pp, reinforce_pp_baseline, rloo)


def inp(rewards, groups, **kw):
    return AdvInput(torch.tensor(rewards, dtype=torch.float32), torch.tensor(groups), **kw)


def close(a, b, tol=1e-4):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol)


# ---- GRPO / Dr. GRPO / RLOO -----------------------------------------------------------------

def test_grpo_hand_and_singleton():
    # group 0: [1, 0, 0] mean 1/3, unbiased std sqrt(1/3); group 1 singleton; group 2 all equal
    a = grpo(inp([1, 0, 0, 1, 0.5, 0.5], [0, 0, 0, 1, 2, 2]))
    s = math.sqrt(1 / 3)
    assert close(a, [(2 / 3) / s, (-1 / 3) / s, (-1 / 3) / s, 0, 0, 0])
    assert close(grpo(inp([1, 0, 0], [0, 0, 0]), scale_std=False), [2 / 3, -1 / 3, -1 / 3])


def test_grpo_sums_to_zero_per_group_variable_sizes():
    g = torch.Generator().manual_seed(0)
    sizes = [1, 2, 3, 5, 8]
    groups = [i for i, n in enumerate(sizes) for _ in range(n)]
    r = torch.rand(len(groups), generator=g)
    for scale in (True, False):
        a = grpo(AdvInput(r, torch.tensor(groups)), scale_std=scale)
        sums = torch.zeros(len(sizes)).index_add_(0, torch.tensor(groups), a)
        assert torch.allclose(sums, torch.zeros(len(sizes)), atol=1e-5)
    assert a[0] == 0  # the singleton


def test_dr_grpo_and_rloo_hand():
    dr = registry.get("advantage", "dr-grpo").obj
    assert close(dr(inp([1, 0, 0, 1], [0, 0, 0, 1])), [2 / 3, -1 / 3, -1 / 3, 0])
    # RLOO: r_i - mean of the others
    assert close(rloo(inp([1, 0, 0, 1, 3], [0, 0, 0, 1, 2])), [1.0, -0.5, -0.5, 0, 0])
    assert close(rloo(inp([1.0, 3.0], [0, 0])), [-2.0, 2.0])


def test_all_equal_non_dyadic_groups_get_exactly_zero():
    # 0.1, 0.7 and 1/3 are not exact in float32: the float32 mean of eight of them is off by an ulp,
    # and (r - mean) / (std + 1e-6) turned that into |A| of 0.007, 0.056 and 0.029 (3.3: 0.19)
    flat = [0.1, 0.7, 1 / 3, 3.3, 0.2 * 0.25 + 0.8 * 0.5]  # the last: a weighted sum of reward parts
    rewards = [v for v in flat for _ in range(8)] + [1.0, 0.0, 0.0, 0.0]
    groups = [g for g in range(len(flat)) for _ in range(8)] + [len(flat)] * 4
    x = inp(rewards, groups)
    n_flat = 8 * len(flat)
    for name, options in [("grpo", {}), ("dr-grpo", {}), ("rloo", {}), ("gapo", {"find_method": "mean"}),
                          ("gapo", {}), ("mc-grpo", {})]:
        a = registry.get("advantage", name).obj(x, **options)
        assert (a[:n_flat] == 0).all(), (name, options, a[:n_flat].abs().max())
        assert (a[n_flat:] != 0).any(), name
    # the informative group is unchanged: GRPO of [1, 0, 0, 0] is (.75, -.25 x3) / sqrt(.25)
    assert close(grpo(x)[n_flat:], [1.5, -0.5, -0.5, -0.5])


def test_grpo_in_float64_then_cast_is_the_rounded_exact_value():
    # n = 62, one success: the float32 path was off by 6.6e-6; float64 statistics are within rounding
    r = [1.0] + [0.0] * 61
    mean = 1 / 62
    var = ((1 - mean) ** 2 + 61 * mean ** 2) / 61  # unbiased
    exact = [(x - mean) / (math.sqrt(var) + 1e-6) for x in r]
    a = grpo(inp(r, [0] * 62))
    assert a.dtype == torch.float32
    assert torch.allclose(a.double(), torch.tensor(exact, dtype=torch.float64), rtol=0, atol=5e-7)


# ---- GPG / REINFORCE++ ----------------------------------------------------------------------

def test_gpg_hand():
    # 3 of 7 rewards nonzero: alpha = 7/3. Group 0 [1, 0, 0, 0]: mean .25; group 1 all equal; group 2 single
    a = gpg(inp([1, 0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 1, 1, 2]))
    al = 7 / 3
    assert close(a, [al * 0.75, -al * 0.25, -al * 0.25, -al * 0.25, 0, 0, 0], tol=1e-6)
    assert close(gpg(inp([1, 0], [0, 0]), f_norm=2.0), [0.5, -0.5], tol=1e-6)  # alpha 2, / f_norm 2
    assert (gpg(inp([0, 0, 0], [0, 0, 0])) == 0).all()  # no nonzero reward: alpha = N / 1, A = 0


def test_reinforce_pp_hand():
    # rewards 1, 0, 1 with 2, 1, 1 tokens; gamma = 1: token returns [1, 1 | 0 | 1], mean .75,
    # unbiased var (3 * .0625 + .5625) / 3 = .25 -> A = (G - .75) / .5
    m = torch.tensor([[1., 1], [1, 0], [1, 0]])
    a = reinforce_pp(inp([1, 0, 1], [0, 1, 2], mask_NT=m))
    assert a.shape == (3, 2)
    assert close(a, [[0.5, 0.5], [-1.5, 0], [0.5, 0]], tol=1e-6)
    # gamma = .5: a 3-token success returns [.25, .5, 1], a 1-token failure [0]
    m = torch.tensor([[1., 1, 1], [1, 0, 0]])
    g = [0.25, 0.5, 1.0, 0.0]
    mean = sum(g) / 4
    std = math.sqrt(sum((x - mean) ** 2 for x in g) / 3 + 1e-8)
    want = [[(x - mean) / std for x in g[:3]], [(g[3] - mean) / std, 0, 0]]
    assert close(reinforce_pp(inp([1, 0], [0, 1], mask_NT=m), gamma=0.5), want, tol=1e-6)


def test_reinforce_pp_baseline_hand():
    # group 0 [1, 0] with 1 and 3 tokens -> centred [.5, -.5]; group 1 [1, 1] (1 token each) -> [0, 0].
    # tokens [.5 | -.5 x3 | 0 | 0]: mean -1/6, unbiased var (4/9 + 3/9 + 2/36) / 5 = 1/6
    m = torch.tensor([[1., 0, 0], [1, 1, 1], [1, 0, 0], [1, 0, 0]])
    a = reinforce_pp_baseline(inp([1, 0, 1, 1], [0, 0, 1, 1], mask_NT=m))
    s = math.sqrt(1 / 6 + 1e-8)
    hi, lo, flat = (0.5 + 1 / 6) / s, (-0.5 + 1 / 6) / s, (1 / 6) / s
    assert close(a, [[hi, 0, 0], [lo, lo, lo], [flat, 0, 0], [flat, 0, 0]], tol=1e-6)
    # the all-equal group is shifted by the batch mean (as verl), not 0; a batch of flat groups is all 0
    assert a[2, 0] != 0
    assert (reinforce_pp_baseline(inp([1, 1, 0, 0], [0, 0, 1, 1], mask_NT=torch.ones(4, 2))) == 0).all()


# ---- MC-GRPO -----------------------------------------------------------------------------------

def test_mc_grpo_hand_pivot_dropped_and_count_is_G():
    r = [0.2, 0.9, 0.5, 0.1, 0.7]  # G + 1 = 5; median 0.5 (index 2); |dev| = .3 .4 0 .4 .2 -> MAD .3
    a = mc_grpo(inp(r, [0] * 5))
    exp = [(x - 0.5) / (0.3 + 1e-3) for x in r]
    exp[2] = 0.0
    assert close(a, exp)
    assert int((a != 0).sum()) == 4  # G rollouts carry gradient


def test_mc_grpo_binary_mad_zero_options_and_ties():
    r, g = [1, 0, 0, 1, 0], [0] * 5  # median 0, MAD 0; pivot = first 0 (index 1)
    assert close(mc_grpo(inp(r, g)), [1000, 0, 0, 1000, 0], tol=1e-2)
    assert close(mc_grpo(inp(r, g), mad_zero="sign"), [1, 0, 0, 1, 0])
    s = torch.tensor(r, dtype=torch.float32).std()
    assert close(mc_grpo(inp(r, g), mad_zero="std"), [1 / (s + 1e-6), 0, 0, 1 / (s + 1e-6), 0])
    # ties at the median: [1,1,1,0,0] -> m = 1, pivot index 0, MAD 0
    assert close(mc_grpo(inp([1, 1, 1, 0, 0], g), mad_zero="sign"), [0, 0, 0, -1, -1])
    with pytest.raises(ValueError):
        mc_grpo(inp(r, g), mad_zero="bogus")


# ---- GAPO --------------------------------------------------------------------------------------

def test_gapo_spec_case_q_is_zero():
    r = [0, 0, 0, 0, 1, 1, 1, 0.5]  # spec E7: tau=0.5 -> Q=0
    a = gapo(inp(r, [0] * 8), tau=0.5)
    sigma = math.sqrt((3 * 1 + 0.25) / 7)
    assert close(a, [x / (sigma + 1e-6) for x in r])
    assert close(gapo(inp(r, [0] * 8), scale_std=False), r)


def test_gapo_window_median_and_mean():
    # k = 2: windows (0.1,0.2) range .1, (0.2,0.25) range .05, (0.25,0.9) -> Q = 0.225
    r = [0.9, 0.1, 0.25, 0.2]
    assert close(gapo(inp(r, [0] * 4), scale_std=False), [x - 0.225 for x in r])
    # tau=0.6, n=5 -> k=3: (1,1,1) has range 0 -> Q = 1 for mean and median
    r2 = [5, 1, 0, 1, 1]
    for m in ("mean", "median"):
        assert close(gapo(inp(r2, [0] * 5), tau=0.6, find_method=m, scale_std=False), [4, 0, -1, 0, 0])


# ---- KTAE --------------------------------------------------------------------------------------

def test_fisher_two_sided_hand():
    p = fisher_two_sided(torch.tensor([2., 1, 3]), torch.tensor([0., 1, 1]), torch.tensor([0., 1, 1]),
                         torch.tensor([2., 1, 3]))
    # [[2,0],[0,2]]: P = 1/6, 4/6, 1/6 -> 1/3; [[1,1],[1,1]] -> 1; [[3,1],[1,3]]: (1+16+16+1)/70
    assert close(p, [1 / 3, 1.0, 34 / 70], tol=1e-9)


def _ktae_case():
    # correct: [7,7,3], [3,4]; wrong: [7,4,4,4], [4,5]   (0 = padding)
    ids = torch.tensor([[7, 7, 3, 0], [3, 4, 0, 0], [7, 4, 4, 4], [4, 5, 0, 0]])
    mask = (ids > 0).float()
    return inp([1, 1, 0, 0], [0] * 4, token_ids_NT=ids, mask_NT=mask)


def test_ktae_hand_key_score_full_formula():
    x_in = _ktae_case()
    a = ktae(x_in)
    base = 0.5 / (math.sqrt(1 / 3) + 1e-6)  # GRPO part for [1,1,0,0]
    # token 4: a=1 (correct), b=2 (wrong), c=1, d=0
    f = 0.0  # two-sided Fisher p = 0.5 + 0.5 = 1 -> f = 0
    h_y = 1.0
    ig = h_y - 0.75 * (-(1 / 3) * math.log2(1 / 3) - (2 / 3) * math.log2(2 / 3))
    h = math.asin(math.sqrt(1 / 2)) - math.asin(1.0)
    t_c, t_w = 5, 6
    avg = (t_c + t_w) / 2
    fc, fw = 1 / t_c, 4 / t_w
    tf_c = fc * 3 / (fc + 2 * (1 - 0.5 + 0.5 * t_c / avg))
    tf_w = fw * 3 / (fw + 2 * (1 - 0.5 + 0.5 * t_w / avg))
    x = h + tf_c / (tf_w + 1e-5) - tf_w / (tf_c + 1e-5)
    K4 = 2 * (1 / (1 + math.exp(-((f + ig) * x / 2))) - 0.5)
    assert abs(K4 - (-0.2250)) < 2e-3  # the number worked out by hand
    assert abs(a[1, 1].item() - (base + K4)) < 1e-5  # row 1 (correct), token 4
    assert abs(a[2, 1].item() - (-base + K4)) < 1e-5  # row 2 (wrong), token 4
    # token 7: table [[1,1],[1,1]] carries no information -> K = 0
    assert abs(a[0, 0].item() - base) < 1e-6
    assert (a[0, 3] == 0) and (a[3, 2:] == 0).all()  # padding stays 0


def test_ktae_hand_without_tf_and_token_in_every_response():
    ids = torch.tensor([[5, 1], [5, 1], [2, 1], [2, 1]])
    x_in = inp([1, 1, 0, 0], [0] * 4, token_ids_NT=ids, mask_NT=torch.ones(4, 2))
    a = ktae(x_in, tf_term=False)
    base = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    # token 5: [[2,0],[0,2]] -> p = 1/3, f = e^{-2/3}, IG = 1 bit, h = pi/2
    K5 = 2 * (1 / (1 + math.exp(-((math.exp(-2 / 3) + 1) * (math.pi / 2) / 2))) - 0.5)
    assert close(a[:, 0], [base + K5, base + K5, -base - K5, -base - K5], tol=1e-5)
    assert close(a[:, 1], [base, base, -base, -base], tol=1e-6)  # token 1 in every response: K = 0
    # zero_token_ids parameterises the official code's hard-coded EOS id
    a0 = ktae(x_in, tf_term=False, zero_token_ids=[5])
    assert close(a0[:, 0], [base, base, -base - K5, -base - K5], tol=1e-5)  # token 2 keeps its score


def test_ktae_needs_tokens():
    with pytest.raises(ValueError, match="token_ids_NT"):
        ktae(inp([1, 0], [0, 0]))


# ---- PVPO / MSSR / GD2PO ---------------------------------------------------------------------

def test_pvpo_reference_anchor():
    a = pvpo(inp([1, 0, 1, 1], [0, 0, 1, 1], ref_pass_rate_G=torch.tensor([0.25, 1.0])))
    assert close(a, [0.75, -0.25, 0, 0])
    with pytest.raises(ValueError, match="ref_pass_rate_G"):
        pvpo(inp([1, 0], [0, 0]))


def test_mssr_hand_and_sign_preserved():
    x = inp([1, 0, 1], [0, 0, 1], baseline_G=torch.tensor([0.5, 0.25]),
            entropy_NT=torch.ones(3, 2), mask_NT=torch.tensor([[1., 1], [1, 1], [1, 0]]))
    a = mssr(x)
    raw = torch.tensor([0.5, -0.5, 0.75])
    n = (raw - raw.mean()) / (raw.std() + 1e-6)  # [.378, -1.134, .756]
    exp = n[:, None] + torch.minimum(torch.full((3, 2), 0.4), n.abs()[:, None] / 2)
    exp[2, 1] = 0
    assert close(a, exp)
    assert close(a[:, 0], [0.5669, -0.7339, 1.1339], tol=1e-3)
    assert (torch.sign(a[:, 0]) == torch.sign(n)).all()
    with pytest.raises(ValueError, match="baseline_G"):
        mssr(inp([1.0], [0], entropy_NT=torch.ones(1, 1), mask_NT=torch.ones(1, 1)))


def test_beta_baseline_update_forgets_once_per_visit():
    bb = BetaBaseline(lam=0.5)
    assert close(bb.baseline([0, 2]), [0.5, 0.5])  # unseen prompts: the prior Beta(1, 1)
    bb.update([0], [1.0])  # alpha = .5*1 + 1, beta = .5*1 + 0
    assert close(bb.baseline([0]), [0.75])
    # a group of three forgets once: alpha = .5*1.5 + 2 = 2.75, beta = .5*.5 + 1 = 1.25
    # (forgetting per rollout would give .9375 / 2 = .469)
    bb.update([0, 0, 0], [1.0, 1.0, 0.0])
    assert close(bb.baseline([0, 2]), [2.75 / 4, 0.5])
    bb.update([2], [3.0])  # rewards are clipped to [0, 1]: alpha 1.5, beta .5, never a negative count
    assert close(bb.baseline([2]), [0.75])
    with pytest.raises(ValueError, match="lam"):
        BetaBaseline(lam=0.0)


def test_beta_baseline_state_roundtrip_through_torch_save():
    import io

    bb = BetaBaseline(lam=0.9)
    bb.update([3, 3, 11], [1.0, 0.0, 1.0])
    buf = io.BytesIO()
    torch.save(bb.state_dict(), buf)
    again = BetaBaseline(lam=0.9)
    again.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))  # plain values only
    assert again.ab == bb.ab and close(again.baseline([3, 11, 4]), bb.baseline([3, 11, 4]))
    assert not close(again.baseline([11]), [0.5])  # the state was not empty


def test_gd2po_hand_conflict_mask_and_whitening():
    parts = torch.tensor([[1., 1], [1, 0], [0, 1], [0, 0]])
    x = inp([0, 0, 0, 0], [0] * 4, reward_parts_NK=parts, mask_NT=torch.ones(4, 1))
    # per component GRPO: +-0.866; rows 1, 2 conflict (sum 0), g_q = 0.5 -> [.866, 0, 0, -.866]
    # whiten over the 2 kept tokens: mean 0, unbiased var 1.5
    s = 0.5 * 2 * 0.5 / math.sqrt(1 / 3) / math.sqrt(1.5)
    assert close(gd2po(x), [s, 0, 0, -s])
    assert close(gd2po(x, conflict="hard"), [s, 0, 0, -s])
    # no masking: [1.732, 0, 0, -1.732], var = 6/3 -> +-1.2247
    assert close(gd2po(x, conflict="none"), [1.2247, 0, 0, -1.2247])


def test_gd2po_all_positive_components_never_masked():
    g = torch.Generator().manual_seed(1)
    parts = torch.rand(12, 3, generator=g)
    groups = torch.arange(12) // 4
    x = AdvInput(torch.zeros(12), groups, reward_parts_NK=parts, mask_NT=torch.ones(12, 2))
    adv_k = torch.stack([grpo(AdvInput(parts[:, k], groups)) for k in range(3)], 1)
    same_sign = (adv_k > 1e-8).all(1) | (adv_k < -1e-8).all(1)
    a = gd2po(x, conflict="hard")
    assert same_sign.any() and (a[same_sign] != 0).all()
    with pytest.raises(ValueError, match="reward_parts_NK"):
        gd2po(inp([1, 0], [0, 0]))


# ---- every registered estimator on degenerate groups -------------------------------------------

@pytest.mark.parametrize("name", [e.name for e in registry.entries("advantage")])
@pytest.mark.parametrize("rewards,groups", [
    ([1.0], [0]),  # a single rollout
    ([0.0, 0.0, 0.0], [0, 0, 0]),  # all zero
    ([1.0, 1.0, 1.0, 1.0], [0, 0, 0, 0]),  # all equal
    ([1.0, 0.0, 0.0, 1.0, 1.0, 0.5], [0, 1, 1, 2, 2, 2]),  # variable sizes incl. 1
])
def test_every_estimator_finite_on_degenerate_groups(name, rewards, groups):
    N = len(rewards)
    G = max(groups) + 1
    x = inp(rewards, groups, mask_NT=torch.ones(N, 3), token_ids_NT=torch.randint(1, 9, (N, 3)),
            entropy_NT=torch.rand(N, 3), ref_pass_rate_G=torch.full((G,), 0.5),
            reward_parts_NK=torch.tensor(rewards)[:, None].repeat(1, 2), baseline_G=torch.full((G,), 0.5))
    entry = registry.get("advantage", name)
    a = entry.obj(x)
    assert a.shape[0] == N and torch.isfinite(a).all()
    group_relative = name not in ("pvpo", "mssr")
    if entry.facts.get("zero_variance_signal"):  # RL-ZVP: an all-equal group is taught, by design
        assert (a != 0).any(), f"{name}: declares zero_variance_signal but taught an all-equal group nothing"
    elif group_relative and len(set(rewards)) == 1 or group_relative and N == 1:
        assert (a == 0).all(), f"{name}: a group with no reward spread must teach nothing"
