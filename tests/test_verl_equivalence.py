"""Numerical equivalence with verl 0.9.1 (`verl.trainer.ppo.core_algos`, `rollout_corr_helper`).

Every learner part rollwise shares with verl is run on the same random float64 inputs (ragged masks,
singleton and all-equal groups, extreme log-ratios) and must agree within 1e-6, values and gradients,
so a later change cannot drift from the reference silently. Skipped when verl is not installed
(`bash scripts/extras/verl.sh` installs it on CPU).

Documented differences, asserted as such rather than skipped:
- singleton groups: rollwise gives 0 (no within-group baseline, spec D1); verl centres them on 0 (A = r);
- MIS: verl divides by the tokens kept after rejection, rollwise by all tokens (spec E2); only the
  masks are compared here;
- verl's `vanilla` loss always applies the dual clip (clip_ratio_c); rollwise's `ppo-clip` is it with
  c = infinity and `dual-clip` is it with c finite.
"""
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", exc_type=ImportError)
rollout_corr = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper", exc_type=ImportError)
actor_config = pytest.importorskip("verl.workers.config.actor", exc_type=ImportError)

from rollwise.core import registry  # noqa: E402
from rollwise.core.types import Batch, Group, Prompt, Rollout  # noqa: E402
from rollwise.learn.advantages import AdvInput  # noqa: E402
from rollwise.learn.corrections import CorrectionInput  # noqa: E402
from rollwise.learn.learner import Learner, LearnerConfig  # noqa: E402
from rollwise.learn.losses import KL_ESTIMATORS, AggTotals, LossInput, kl_penalty  # noqa: E402

TOL = 1e-6
F64 = torch.float64
SEEDS = [0, 1, 2]


def same(ours, theirs, what=""):
    ours, theirs = torch.as_tensor(ours, dtype=F64), torch.as_tensor(theirs, dtype=F64)
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    assert torch.allclose(ours, theirs, rtol=TOL, atol=TOL), (what, (ours - theirs).abs().max().item())


def part(kind, name):
    return registry.get(kind, name).obj


# ---- random inputs ----------------------------------------------------------------------------

def ragged_mask(gen, N, T):
    """Random response lengths in [1, T], with one 1-token row and one full row."""
    lengths = torch.randint(1, T + 1, (N,), generator=gen)
    lengths[0], lengths[-1] = 1, T
    return (torch.arange(T)[None] < lengths[:, None]).to(F64)


def grouped_rewards(gen, kind):
    """(rewards_N, group_N) over groups of sizes 1..8: binary, continuous, or non-dyadic all-equal
    groups (0.1, 0.7, 1/3) among informative ones."""
    sizes = [4, 1, 8, 3, 5, 2, 1, 6]
    group_N = torch.tensor([g for g, n in enumerate(sizes) for _ in range(n)])
    N = group_N.numel()
    if kind == "binary":
        r = (torch.rand(N, generator=gen) < 0.4).to(F64)
    elif kind == "continuous":
        r = torch.rand(N, generator=gen, dtype=F64) * 3 - 1
    else:
        r = torch.rand(N, generator=gen, dtype=F64)
        for g, v in [(0, 0.1), (2, 0.7), (4, 1 / 3)]:
            r[group_N == g] = v
    return r, group_N


def outcome_rewards_NT(r_N, mask_NT):
    """verl's token_level_rewards: the outcome reward on each response's last token."""
    out = torch.zeros_like(mask_NT)
    out[torch.arange(len(r_N)), mask_NT.sum(1).long() - 1] = r_N
    return out


def singleton_N(group_N):
    return torch.bincount(group_N)[group_N] == 1


def actor_cfg(clip_low=0.2, clip_high=0.28, clip_c=3.0, **info):
    cfg = actor_config.ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, clip_ratio=clip_low,
                                   clip_ratio_low=clip_low, clip_ratio_high=clip_high, clip_ratio_c=clip_c)
    cfg.global_batch_info.update(info)
    return cfg


# ---- advantages -------------------------------------------------------------------------------

KINDS = ["binary", "continuous", "flat"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_group_mean_estimators_match_verl(seed, kind):
    gen = torch.Generator().manual_seed(seed)
    r, group_N = grouped_rewards(gen, kind)
    mask = ragged_mask(gen, len(r), 6)
    index = np.array([f"p{g}" for g in group_N.tolist()], dtype=object)
    inp = AdvInput(r, group_N, mask_NT=mask)
    single = singleton_N(group_N)
    cases = [
        ("grpo", {}, core_algos.compute_grpo_outcome_advantage, {"norm_adv_by_std_in_grpo": True}),
        ("grpo", {"scale_std": False}, core_algos.compute_grpo_outcome_advantage, {"norm_adv_by_std_in_grpo": False}),
        ("dr-grpo", {}, core_algos.compute_grpo_outcome_advantage, {"norm_adv_by_std_in_grpo": False}),
        ("rloo", {}, core_algos.compute_rloo_outcome_advantage, {}),
        ("gpg", {}, core_algos.compute_gpg_outcome_advantage, {}),
        ("gpg", {"f_norm": 2.5}, core_algos.compute_gpg_outcome_advantage, {"f_norm": 2.5}),
    ]
    for name, opts, fn, verl_opts in cases:
        ours = part("advantage", name)(inp, **opts)
        theirs, _ = fn(outcome_rewards_NT(r, mask), mask, index, **verl_opts)
        ours_NT = ours[:, None] * mask
        same(ours_NT[~single], theirs[~single], name)
        assert (ours[single] == 0).all(), name  # rollwise: no baseline, no signal
        if name in ("grpo", "dr-grpo", "rloo") and (r[single] != 0).any():
            assert not torch.allclose(theirs[single], ours_NT[single])  # verl: A = r (times its factor)
    if kind == "flat":  # Group.zero_variance groups: exactly 0 here, rounding noise within 1e-6 in verl
        flat = torch.isin(group_N, torch.tensor([0, 2, 4]))
        for name in ("grpo", "dr-grpo", "rloo", "gpg"):
            assert (part("advantage", name)(inp)[flat] == 0).all(), name


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_reinforce_pp_matches_verl(seed, kind, gamma):
    gen = torch.Generator().manual_seed(seed)
    r, group_N = grouped_rewards(gen, kind)
    mask = ragged_mask(gen, len(r), 7)
    ours = part("advantage", "reinforce++")(AdvInput(r, group_N, mask_NT=mask), gamma=gamma)
    theirs, _ = core_algos.compute_reinforce_plus_plus_outcome_advantage(outcome_rewards_NT(r, mask), mask,
                                                                         config=SimpleNamespace(gamma=gamma))
    same(ours, theirs, "reinforce++")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_reinforce_pp_baseline_matches_verl(seed, kind):
    # whitening is global, so a singleton (verl: centred to r, rollwise: 0) would shift every row:
    # compare on batches without singletons, and check that difference separately
    gen = torch.Generator().manual_seed(seed)
    r, group_N = grouped_rewards(gen, kind)
    keep = ~singleton_N(group_N)
    r, group_N = r[keep], torch.unique(group_N[keep], return_inverse=True)[1]
    mask = ragged_mask(gen, len(r), 5)
    index = np.array(group_N.tolist())
    ours = part("advantage", "reinforce++-baseline")(AdvInput(r, group_N, mask_NT=mask))
    theirs, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(outcome_rewards_NT(r, mask), mask,
                                                                                  index)
    same(ours, theirs, "reinforce++-baseline")


def verl_gdpo(parts_NK, group_N, mask, prompt_len=2):
    """verl's GDPO with the components passed as it reads them (per-key arrays, scored on the last token)."""
    N, T = mask.shape
    keys = [f"c{k}" for k in range(parts_NK.shape[1])]
    attention = torch.cat([torch.ones(N, prompt_len), mask], 1).long()  # integer, as verl keeps it
    batch = {"prompts": torch.zeros(N, prompt_len, dtype=torch.long), "attention_mask": attention}
    adv, _ = core_algos.compute_gdpo_outcome_advantage(
        torch.zeros(N, T, dtype=F64), mask, np.array(group_N.tolist()), config={"gdpo_reward_keys": keys},
        non_tensor_batch={k: parts_NK[:, i].numpy() for i, k in enumerate(keys)}, batch=batch)
    return adv


@pytest.mark.parametrize("seed", SEEDS)
def test_gd2po_without_conflict_mask_is_verl_gdpo(seed):
    # verl's GDPO: per-component GRPO, summed, whitened over the batch's tokens. Components are
    # dyadic (0, .25, ..., 1) because verl casts them to float32 (its all-equal groups are then exact).
    # Whitening is global, so singletons (verl: A_k = r_k) would shift every row: compare without them
    gen = torch.Generator().manual_seed(seed)
    _, group_N = grouped_rewards(gen, "binary")
    group_N = torch.unique(group_N[~singleton_N(group_N)], return_inverse=True)[1]
    N, K = len(group_N), 3
    parts_NK = torch.randint(0, 5, (N, K), generator=gen).to(F64) / 4
    parts_NK[group_N == 2] = 0.5  # an all-equal group in every component
    mask = ragged_mask(gen, N, 6)
    ours = part("advantage", "gd2po")(AdvInput(parts_NK.mean(1), group_N, mask_NT=mask, reward_parts_NK=parts_NK),
                                      conflict="none")
    same(ours[:, None] * mask, verl_gdpo(parts_NK, group_N, mask), "gd2po/gdpo")


# ---- policy losses and aggregations --------------------------------------------------------------

def loss_inputs(seed, N=7, T=6, extreme=True):
    """log pi_old, log pi_theta (leaf), A broadcast to tokens (some rows 0), mask, IS weights."""
    gen = torch.Generator().manual_seed(seed)
    mask = ragged_mask(gen, N, T)
    mask[2] = 0  # a fully masked row
    old = -torch.rand(N, T, generator=gen, dtype=F64) * 4
    log_ratio = torch.randn(N, T, generator=gen, dtype=F64) * 0.3
    if extreme:  # stale tokens beyond verl's +-20 clamp, and near the clip boundaries
        log_ratio[0, 0], log_ratio[1, 1], log_ratio[3, 2], log_ratio[4, 0] = 60.0, -25.0, 21.0, math.log(1.28)
    adv = torch.randn(N, 1, generator=gen, dtype=F64).expand(N, T).clone()
    adv[5] = 0.0
    adv[0], adv[3] = -1.3, -0.7  # negative advantages on the exploding ratios (the dual-clip case)
    weights = torch.rand(N, T, generator=gen, dtype=F64) * 2
    return old, old + log_ratio, adv, mask, weights


AGGS = {  # rollwise aggregation (options) -> verl loss_agg_mode
    "token-mean": ("token-mean", {}),
    "token-sum": ("token-sum", {}),
    "seq-mean-token-mean": ("seq-mean-token-mean", {}),
    "seq-mean-token-sum-norm": ("seq-mean-token-sum-norm", {"max_len": 11}),
}

LOSSES = [  # rollwise loss (options) -> verl loss function, its clip_ratio_low/high/c
    ("ppo-clip", {}, core_algos.compute_policy_loss_vanilla, (0.2, 0.28, 1e30)),
    ("ppo-clip", {"clip_low": 0.1, "clip_high": 0.1}, core_algos.compute_policy_loss_vanilla, (0.1, 0.1, 1e30)),
    ("dual-clip", {}, core_algos.compute_policy_loss_vanilla, (0.2, 0.28, 3.0)),
    ("dual-clip", {"clip_c": 10.0}, core_algos.compute_policy_loss_vanilla, (0.2, 0.28, 10.0)),
    ("no-clip", {}, core_algos.compute_policy_loss_vanilla, (1e30, 1e30, 1e30)),
    ("gspo", {}, core_algos.compute_policy_loss_gspo, (3e-4, 4e-4, 3.0)),
    ("gspo", {"clip_low": 0.2, "clip_high": 0.28}, core_algos.compute_policy_loss_gspo, (0.2, 0.28, 3.0)),
    ("cispo", {"clip_low": 0.2, "clip_high": 0.28}, core_algos.compute_policy_loss_cispo, (0.2, 0.28, 3.0)),
    ("cispo", {}, core_algos.compute_policy_loss_cispo, (1.0, 0.28, 3.0)),
    ("gpg", {}, core_algos.compute_policy_loss_gpg, (0.2, 0.28, 3.0)),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("agg", list(AGGS))
@pytest.mark.parametrize("with_weights", [False, True])
@pytest.mark.parametrize("loss_name,opts,verl_fn,clips", LOSSES, ids=lambda v: v if isinstance(v, str) else "")
def test_policy_losses_match_verl(seed, agg, with_weights, loss_name, opts, verl_fn, clips):
    old, logp0, adv, mask, weights = loss_inputs(seed)
    verl_mode, agg_opts = AGGS[agg]
    totals = AggTotals(tokens=int(mask.sum()), seqs=mask.shape[0])
    info = {"dp_size": 1, "batch_num_tokens": totals.tokens, "global_batch_size": totals.seqs,
            "loss_scale_factor": agg_opts.get("max_len")}
    w = weights if with_weights else None

    logp = logp0.clone().requires_grad_(True)
    loss_NT, _ = part("loss", loss_name)(LossInput(logp, old, adv, mask, w), **opts)
    ours = part("aggregation", agg)(loss_NT, mask, totals, **agg_opts)
    g_ours = torch.autograd.grad(ours, logp)[0]

    logp_v = logp0.clone().requires_grad_(True)
    theirs, _ = verl_fn(old, logp_v, adv, mask, verl_mode, actor_cfg(*clips, **info), rollout_is_weights=w)
    g_theirs = torch.autograd.grad(theirs, logp_v)[0]
    same(ours, theirs, f"{loss_name} value")
    same(g_ours, g_theirs, f"{loss_name} gradient")


def test_ppo_log_ratio_clamp_matches_verl_on_a_stale_token():
    # log r = 60, A = -1, dual clip off: both give e^20 (not e^60) and no gradient
    old = torch.zeros(1, 1, dtype=F64)
    logp = torch.full((1, 1), 60.0, dtype=F64, requires_grad=True)
    adv, mask = -torch.ones(1, 1, dtype=F64), torch.ones(1, 1, dtype=F64)
    loss_NT, _ = part("loss", "ppo-clip")(LossInput(logp, old, adv, mask))
    theirs, _ = core_algos.compute_policy_loss_vanilla(old, logp, adv, mask, "token-mean", actor_cfg(clip_c=1e30))
    same(loss_NT.sum(), theirs)
    assert loss_NT.item() == pytest.approx(math.exp(20.0))
    assert torch.autograd.grad(loss_NT.sum(), logp)[0].item() == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_aggregations_match_verl_defaults(seed):
    # without global batch info verl counts the call's tokens and its non-empty sequences, and
    # seq-mean-token-sum-norm divides by the padded width: the same as rollwise when no row is empty
    gen = torch.Generator().manual_seed(seed)
    mask = ragged_mask(gen, 6, 5)
    loss = torch.randn(6, 5, generator=gen, dtype=F64)
    totals = AggTotals(tokens=int(mask.sum()), seqs=6)
    for agg, (mode, _) in AGGS.items():
        same(part("aggregation", agg)(loss, mask, totals), core_algos.agg_loss(loss, mask, mode), agg)


# ---- KL estimators -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", KL_ESTIMATORS)
def test_kl_estimators_match_verl(name):
    gen = torch.Generator().manual_seed(7)
    logp0 = -torch.rand(5, 8, generator=gen, dtype=F64) * 5
    ref = logp0 + torch.randn(5, 8, generator=gen, dtype=F64) * 2
    ref[0, :4] = logp0[0, :4] + torch.tensor([30.0, -30.0, 2.7, -11.5], dtype=F64)  # past k3's clamps
    a, b = logp0.clone().requires_grad_(True), logp0.clone().requires_grad_(True)
    ours, theirs = kl_penalty(a, ref, name), core_algos.kl_penalty(b, ref, name)
    same(ours, theirs, f"{name} value")
    same(torch.autograd.grad(ours.sum(), a)[0], torch.autograd.grad(theirs.sum(), b)[0], f"{name} gradient")


# ---- rollout corrections -----------------------------------------------------------------------

def correction_inputs(seed, N=6, T=7):
    gen = torch.Generator().manual_seed(seed)
    mask = ragged_mask(gen, N, T)
    old = -torch.rand(N, T, generator=gen, dtype=F64) * 4
    log_rho = torch.randn(N, T, generator=gen, dtype=F64) * 0.5
    log_rho[1, :3] = torch.tensor([25.0, -24.0, 0.5], dtype=F64)  # the tis-seq case
    log_rho[2, 0], log_rho[3, 1] = -30.0, 21.0
    behav = old - log_rho
    return CorrectionInput(old.clone(), old, behav, mask), old, behav, mask


def verl_is(old, behav, mask, level, threshold):
    w, _ = rollout_corr.compute_rollout_correction_weights(old - behav, mask, rollout_is=level,
                                                           rollout_is_threshold=threshold)
    return w


def verl_rs(old, behav, mask, option, threshold):
    kept, _ = rollout_corr.compute_rollout_rejection_mask(old - behav, mask, rollout_rs=option,
                                                          rollout_rs_threshold=threshold)
    return kept


@pytest.mark.parametrize("seed", SEEDS)
def test_is_weights_match_verl(seed):
    ci, old, behav, mask = correction_inputs(seed)
    on = mask > 0
    for C in (2.0, 5.0):
        w, _ = part("correction", "tis-token")(ci, threshold=C)
        same(w[on], verl_is(old, behav, mask, "token", C)[on], "tis-token")
        w, _ = part("correction", "tis-seq")(ci, threshold=C)
        same(w[on], verl_is(old, behav, mask, "sequence", C)[on], "tis-seq")
        # AReaL's clamp is token TIS at the cap; its mask mode is IcePop with no lower bound
        w, _ = part("correction", "areal-decoupled")(ci, cap=C, mode="clamp")
        same(w[on], verl_is(old, behav, mask, "token", C)[on], "areal clamp")
        w, keep = part("correction", "areal-decoupled")(ci, cap=C, mode="mask")
        same((w * keep)[on], verl_is(old, behav, mask, "token", f"1e-300_{C}")[on], "areal mask")
    # IcePop: rho kept in [lo, hi], 0 outside = MIS with reweight
    w, keep = part("correction", "mis-token")(ci, threshold=2.0, threshold_low=0.5, reweight=True)
    same((w * keep)[on], verl_is(old, behav, mask, "token", "0.5_2.0")[on], "icepop")


@pytest.mark.parametrize("seed", SEEDS)
def test_rejection_masks_match_verl(seed):
    ci, old, behav, mask = correction_inputs(seed)
    on = mask > 0
    for C in (1.5, 2.0):
        _, keep = part("correction", "mis-token")(ci, threshold=C)
        same(keep[on], verl_rs(old, behav, mask, "token_k1", C)[on], "mis-token")
        _, keep = part("correction", "mis-seq")(ci, threshold=C, threshold_low=1 / C)
        same(keep[on], verl_rs(old, behav, mask, "seq_sum_k1", C)[on], "mis-seq")
    _, keep = part("correction", "mis-seq")(ci, threshold=1.05, threshold_low=1 / 1.05, geometric=True)
    same(keep[on], verl_rs(old, behav, mask, "seq_mean_k1", 1.05)[on], "geo-rs")
    # verl's k1 statistic is log(mu/pi_old): its asymmetric "lo_hi" keeps rho in [1/hi, 1/lo]
    _, keep = part("correction", "mis-token")(ci, threshold=1 / 0.8, threshold_low=1 / 1.5)
    same(keep[on], verl_rs(old, behav, mask, "token_k1", "0.8_1.5")[on], "mis-token asymmetric")


# ---- a whole Learner.update ---------------------------------------------------------------------

class EmbeddingPolicy:
    """pi(token | previous token) = softmax(W[previous]), float64: every row's log-probs depend on W."""

    def __init__(self, vocab=9, seed=0):
        gen = torch.Generator().manual_seed(seed)
        self.model = torch.nn.Embedding(vocab, vocab).double()
        with torch.no_grad():
            self.model.weight.copy_(torch.randn(vocab, vocab, generator=gen, dtype=F64))
        self.version = 0

    def response_logprobs(self, prompts, responses, temperature=1.0):
        rows = []
        for p, r in zip(prompts, responses):
            prev = torch.tensor([p[-1]] + list(r[:-1]))
            logits = self.model(prev) / temperature
            rows.append(torch.log_softmax(logits, -1).gather(1, torch.tensor(r)[:, None])[:, 0])
        lp = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
        return lp, torch.zeros_like(lp).detach(), None


def update_batch(seed=3):
    gen = torch.Generator().manual_seed(seed)
    groups = []
    for pid, rewards in enumerate([[1, 0, 0, 1, 1], [0.7] * 4, [1, 1, 1], [1, 0, 0, 0, 0, 0], [0, 1]]):
        ros = []
        for rw in rewards:
            T = int(torch.randint(1, 7, (1,), generator=gen))
            tok = torch.randint(0, 9, (T,), generator=gen)
            ros.append(Rollout(pid, [int(torch.randint(0, 9, (1,), generator=gen))], tok, -torch.rand(T, generator=gen),
                               "", "eos", 0, reward=float(rw), correct=rw == 1))
        groups.append(Group(Prompt(pid, "", ""), ros))
    return Batch(groups)


def verl_update(batch, cfg, policy, ref, seed):
    """The same step written with verl's parts: verl's GRPO advantages, loss, aggregation and KL loss;
    rollwise's minibatch order (the learner's generator), SGD so that the step is the gradient."""
    rs = batch.rollouts
    prompts, responses = [r.prompt_ids for r in rs], [r.token_ids_T.tolist() for r in rs]
    mask = torch.nn.utils.rnn.pad_sequence([torch.ones(r.num_tokens, dtype=F64) for r in rs], batch_first=True)
    r_N = torch.tensor([r.reward for r in rs], dtype=F64)
    index = np.array([gi for gi, g in enumerate(batch.groups) for _ in g.rollouts])
    adv, _ = core_algos.compute_grpo_outcome_advantage(outcome_rewards_NT(r_N, mask), mask, index)
    rows = torch.arange(len(rs))
    if cfg.drop_zero_adv and cfg.kl_coef == 0:  # verl's equivalent: filter the zero-variance groups out first
        informative = torch.tensor([not g.zero_variance for g in batch.groups for _ in g.rollouts])
        rows = rows[informative]
    with torch.no_grad():
        old = policy.response_logprobs([prompts[i] for i in rows], [responses[i] for i in rows])[0]
        ref_lp = ref.response_logprobs([prompts[i] for i in rows], [responses[i] for i in rows])[0] if ref else None
    opt = torch.optim.SGD(policy.model.parameters(), lr=cfg.lr)
    gen = torch.Generator().manual_seed(seed)
    clip_c = cfg.loss_options.get("clip_c", 3.0) if cfg.loss == "dual-clip" else 1e30
    for _ in range(cfg.epochs):
        for mb in torch.randperm(rows.numel(), generator=gen).chunk(min(cfg.minibatches, rows.numel())):
            idx = rows[mb]
            logp = policy.response_logprobs([prompts[i] for i in idx], [responses[i] for i in idx])[0]
            T = logp.shape[1]
            m = mask[idx, :T]
            info = {"dp_size": 1, "batch_num_tokens": int(m.sum()), "global_batch_size": int(mb.numel())}
            loss, _ = core_algos.compute_policy_loss_vanilla(old[mb, :T], logp, adv[idx, :T], m, cfg.loss_agg,
                                                             actor_cfg(0.2, 0.28, clip_c, **info))
            if ref is not None:
                kld = core_algos.kl_penalty(logp, ref_lp[mb, :T], cfg.kl_estimator)
                loss = loss + cfg.kl_coef * core_algos.agg_loss(kld, m, cfg.loss_agg, **info)
            opt.zero_grad()
            loss.backward()
            opt.step()


@pytest.mark.parametrize("cfg", [
    dict(kl_coef=0.1, kl_estimator="low_var_kl"),  # zero-advantage rows stay, for their KL gradient
    dict(kl_coef=0.05, kl_estimator="k2", loss="dual-clip", loss_agg="seq-mean-token-mean", minibatches=3),
    dict(drop_zero_adv=False),
    dict(),  # drop_zero_adv: verl filtering the zero-variance groups out first
], ids=["kl-k3", "kl-k2-dualclip-seqmean", "no-drop", "drop"])
def test_learner_update_matches_a_verl_step(cfg):
    seed = 11
    cfg = LearnerConfig(lr=0.3, grad_clip=1e9, epochs=2, **{"minibatches": 2, **cfg})
    ref = EmbeddingPolicy(seed=5) if cfg.kl_coef > 0 else None
    ours, theirs = EmbeddingPolicy(), EmbeddingPolicy()
    learner = Learner(ours, cfg, ref_policy=ref, seed=seed)
    learner.opt = torch.optim.SGD(ours.model.parameters(), lr=cfg.lr)  # the step is then the gradient itself
    batch = update_batch()
    st = learner.update(batch)
    verl_update(batch, cfg, theirs, ref, seed)
    moved = (ours.model.weight - EmbeddingPolicy().model.weight).abs().max().item()
    assert st["updated"] == 1 and moved > 1e-3  # the step did something
    same(ours.model.weight.detach(), theirs.model.weight.detach(), "weights after the update")
