"""Off-policy corrections (`--correction`), registered by name.

Behaviour log-probs mu come from the engine (what actually sampled the tokens); pi_old is recomputed
by the learner before the update; pi_theta is the policy being trained.
Contract: `fn(ci: CorrectionInput, **options) -> (weight_NT, keep_NT)`: detached per-token weights
that multiply the per-token loss, and a 0/1 mask of tokens kept in the loss. Identity: (1, 1).
Every correction here is the identity when mu = pi_old = pi_theta. Weights are always detached
(spec E3); masking never rescales the other tokens: the learner keeps the pre-mask denominators
(spec E2). Ratios are rho = pi_old/mu unless an option says otherwise. Tags as in core/registry.py.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.registry import register


@dataclass
class CorrectionInput:
    logp_NT: torch.Tensor  # log pi_theta (may carry grad; corrections must detach what they use)
    old_logp_NT: torch.Tensor  # log pi_old
    behav_logp_NT: torch.Tensor  # log mu
    mask_NT: torch.Tensor


@register("correction", "none", provenance="CODE", summary="no off-policy correction (on-policy GRPO)")
def no_correction(ci: CorrectionInput):
    ones = torch.ones_like(ci.mask_NT)
    return ones, ones


# ---- helpers ------------------------------------------------------------------------------------

_LOG_BOUND = 20.0  # verl's safety bound on log-ratios before exp


def _log_rho(ci: CorrectionInput, against: str = "old") -> torch.Tensor:
    """Detached per-token log(pi/mu) on response tokens (0 elsewhere); pi = pi_old or pi_theta."""
    if against not in ("old", "theta"):
        raise ValueError(f"against must be 'old' or 'theta', not {against!r}")
    top = ci.old_logp_NT if against == "old" else ci.logp_NT
    m = ci.mask_NT > 0
    return torch.where(m, (top.detach() - ci.behav_logp_NT.detach()).clamp(-_LOG_BOUND, _LOG_BOUND), 0.0)


def _seq_log_rho(ci: CorrectionInput, geometric: bool = False) -> torch.Tensor:
    lr = _log_rho(ci).sum(1)
    return lr / ci.mask_NT.float().sum(1).clamp(min=1) if geometric else lr


def _ones(ci: CorrectionInput) -> torch.Tensor:
    return torch.ones_like(ci.mask_NT, dtype=torch.float32)


# ---- verl rollout correction: TIS / MIS -------------------------------------------------------

@register("correction", "tis-token", provenance="CODE",
          summary="token TIS: weight min(pi_old/mu, C) per token (verl rollout_is=token, C=2)")
def tis_token(ci: CorrectionInput, threshold: float = 2.0):
    """Token-level truncated importance sampling between pi_old and the behaviour policy mu
    (Yao et al., 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training";
    Liu, Li et al., 2025, "When Speed Kills Stability: Demystifying RL Collapse from the
    Training-Inference Mismatch"). [CODE: volcengine/verl docs/algo/rollout_corr_math.md,
    rollout_correction.yaml; spec C6]
    w_t = min(rho_t, C), rho_t = pi_old/mu (decoupled mode: pi_old recomputed by the trainer);
    loss = sg(w_t) * PPOclip(pi_theta/pi_old, A). C (`rollout_is_threshold`) = 2 (FP8 report)."""
    w = torch.exp(_log_rho(ci)).clamp(max=threshold)
    return torch.where(ci.mask_NT > 0, w, 1.0), _ones(ci)


@register("correction", "tis-seq", provenance="CODE",
          summary="sequence TIS: weight min(prod_t pi_old/mu, C) broadcast to the sequence's tokens")
def tis_seq(ci: CorrectionInput, threshold: float = 2.0):
    """Sequence-level truncated IS (same sources as `tis-token`). [CODE: verl rollout_is=sequence]
    w = min(prod_t rho_t, C), broadcast to every token. In log space: the token log-ratios are summed
    unclamped, then the sum is clamped to [-20, 20] before exp, as verl does (so w >= e^-20). Clamping
    each token first would make one e^25 token followed by an e^-24 one weigh e^0.5, not min(e^1.5, C)."""
    m = ci.mask_NT > 0
    log_rho = torch.where(m, ci.old_logp_NT.detach() - ci.behav_logp_NT.detach(), 0.0).sum(1)
    w = torch.exp(log_rho.clamp(-_LOG_BOUND, _LOG_BOUND)).clamp(max=threshold)
    return torch.where(m, w[:, None].expand_as(ci.mask_NT), 1.0), _ones(ci)


@register("correction", "mis-token", provenance="CODE+INF",
          summary="token MIS: drop tokens with pi_old/mu outside [C_low, C_high] from the loss")
def mis_token(ci: CorrectionInput, threshold: float = 2.0, threshold_low: float | None = None,
              reweight: bool = False):
    """Token-level masked IS / rejection sampling (Liu, Li et al., 2025, "When Speed Kills Stability").
    [CODE: verl rollout_rs=token_k1; spec C6] keep_t = 1[C_low <= rho_t <= C_high], rho_t = pi_old/mu;
    C_low defaults to 1/C_high (verl). Rejected tokens leave the loss; the denominator keeps the
    original token count (AReaL's choice, spec E2). verl differs: its rejection rewrites response_mask
    before the update and the token counts come from that mask, so verl divides by the tokens *kept*.
    verl's statistic is k1 = log(mu/pi_old) with bounds [log lo, log hi]: an asymmetric "lo_hi" spec
    there keeps rho in [1/hi, 1/lo]; here threshold_low/threshold bound rho itself.
    reweight=True also multiplies kept tokens by rho_t (the blog's MIS: rho 1[rho <= C])."""
    lo = 1.0 / threshold if threshold_low is None else threshold_low
    lr = _log_rho(ci)
    keep = ((lr <= math.log(threshold)) & (lr >= math.log(lo))).float()
    w = torch.exp(lr) * keep if reweight else _ones(ci)
    return torch.where(ci.mask_NT > 0, w, 1.0), keep


@register("correction", "mis-seq", provenance="CODE",
          summary="sequence MIS: drop whole sequences whose ratio prod_t pi_old/mu exceeds C")
def mis_seq(ci: CorrectionInput, threshold: float = 2.0, threshold_low: float | None = None,
            geometric: bool = False):
    """Sequence-level masked IS / rejection (same sources as `mis-token`).
    [CODE: verl rollout_rs=seq_sum_k1 (geometric: seq_mean_k1); spec C6]
    Reject a sequence when prod_t rho_t > C (or < threshold_low when given; verl's k1 spec "C" also
    rejects below 1/C: pass threshold_low=1/C for that).
    geometric=True is Geo-RS: test exp(mean_t log rho_t) instead, which is length-invariant; use it with
    thresholds close to 1 (e.g. 0.999-1.001). As in verl's rejection, each token's log-ratio is clamped
    to [-20, 20] before the sum (unlike `tis-seq`, where verl clamps the sum). Denominators: see
    `mis-token` (verl divides by the tokens kept)."""
    lr = _seq_log_rho(ci, geometric)
    ok = lr <= math.log(threshold)
    if threshold_low is not None:
        ok = ok & (lr >= math.log(threshold_low))
    return _ones(ci), ok.float()[:, None].expand_as(ci.mask_NT).contiguous()


# ---- AReaL decoupled PPO -------------------------------------------------------------------------

@register("correction", "areal-decoupled", provenance="CODE",
          summary="AReaL decoupled PPO: weight pi_prox/pi_behav, tokens above the cap (5) masked")
def areal_decoupled(ci: CorrectionInput, cap: float = 5.0, mode: str = "mask"):
    """AReaL's decoupled objective (Fu et al., 2025, "AReaL: A Large-Scale Asynchronous Reinforcement
    Learning System for Language Reasoning", arXiv 2505.24298). [CODE: areal/utils/functional
    ppo_actor_loss_fn, behave_imp_weight_cap; spec C3]
    J = E_{a~mu}[ sum_t sg(pi_prox/mu)_t min(u_t A, clip(u_t, 1-eps, 1+eps_high) A) ], u = pi_theta/pi_prox.
    In rollwise pi_prox is the learner's recomputed pi_old (recompute_old=True), mu the engine's
    behaviour log-probs, and the PPO part is the `ppo-clip` loss; this correction supplies
    w = pi_prox/mu. Tokens with w > cap are masked (mode="mask", AReaL's old token_mask default) or
    clamped to cap (mode="clamp"). The denominator keeps the original token count (spec E2)."""
    if mode not in ("mask", "clamp"):
        raise ValueError(f"areal-decoupled: mode must be 'mask' or 'clamp', not {mode!r}")
    w = torch.exp(_log_rho(ci))
    if mode == "clamp":
        return torch.where(ci.mask_NT > 0, w.clamp(max=cap), 1.0), _ones(ci)
    keep = (w <= cap).float()
    return torch.where(ci.mask_NT > 0, w * keep, 1.0), keep


# ---- M2PO, MinPRO, AIS ---------------------------------------------------------------------------

def m2po_mask(m_M: torch.Tensor, tau: float) -> torch.Tensor:
    """Indices (into m_M) of the fewest largest values to drop so that the mean of the rest is < tau.
    Never drops everything [spec C4]: when even the smallest value is >= tau, all but the smallest go
    [INF: the fallback is rollwise's choice]."""
    n = m_M.numel()
    if n == 0:
        return torch.zeros(0, dtype=torch.long, device=m_M.device)
    vals, order = m_M.double().sort(descending=True)
    suffix_mean = vals.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, dtype=torch.float64, device=m_M.device)
    hit = (suffix_mean < tau).nonzero()
    k = int(hit[0, 0]) if hit.numel() else n - 1
    return order[:k]


@register("correction", "m2po", provenance="CODE+INF",
          summary="M2PO: mask the largest (log mu - log pi_prox)^2 tokens until their mean is < 0.04")
def m2po(ci: CorrectionInput, tau: float = 0.04, against: str = "old"):
    """M2PO, second-moment trust policy optimisation (Zheng et al., 2025, "Prosperity before Collapse:
    How Far Can Off-Policy RL Reach with Stale Data on LLMs?", arXiv 2510.01161).
    [CODE: AReaL areal/trainer/ppo/actor.py _apply_m2po_masking + docs; spec C4]
    Over the valid tokens, m_t = d_t^2 with d_t = log mu - log pi_prox (against="old", AReaL) or the
    paper's log(pi_theta/mu) (against="theta", detached). Sort m descending and mask the k largest,
    k the first index with mean(m[k:]) < tau (suffix means): the fewest tokens such that the kept
    second moment is below tau; never everything. Objective (no PPO clip): use with the `no-clip`
    loss and token-mean, J = (1/sum|o_i|) sum M_{i,t} r_{i,t} A_i; the denominator keeps the original
    token count (spec E2). tau (M2_budget) = 0.04.
    The official repo (Infini-AI-Lab/M2PO) instead turns the same budget into PPO clip bounds over
    "harmful" tokens: that variant is the `m2po-clip` loss.
    The statistic is taken over the tokens of the call (a micro-batch; the minibatch when
    micro_batch_rows >= the minibatch's rows, the default)."""
    m = ci.mask_NT > 0
    d2 = _log_rho(ci, against) ** 2
    keep = m.float()
    flat = keep.view(-1)
    valid = m.view(-1).nonzero(as_tuple=True)[0]
    flat[valid[m2po_mask(d2.view(-1)[valid], tau)]] = 0.0
    return _ones(ci), keep


@register("correction", "minpro", provenance="ABS+INF",
          summary="MinPRO: weight min(1, min_{j<t} pi_theta/mu), the minimum prefix ratio, detached")
def minpro(ci: CorrectionInput, cap: bool = True, against: str = "theta"):
    """MinPRO, minimum prefix ratio (arXiv 2601.22718, ByteDance BandAI; title not recovered here; no
    code found). [ABS: the min-prefix form; INF: the cap and the formula details, spec C5]
    The exact off-policy weight of token t is the prefix product prod_{j<=t} rho_j, rho_j = pi_theta/mu;
    token IS drops prod_{j<t}, the product explodes. MinPRO uses c_t = min_{j<t} rho_j (c_1 = 1), a
    cumulative minimum of the detached ratios shifted by one position (computed in log space), and
    loss_t = sg(min(1, c_t)) * clipped_surrogate_t (cap=True, recommended [INF]) or sg(c_t) (cap=False).
    against="old" uses pi_old/mu instead of pi_theta/mu. Aggregate with token-mean. In the paper's
    setting the PPO ratio is also against mu: set recompute_old=False so pi_old = mu."""
    lr = _log_rho(ci, against)
    lr = torch.where(ci.mask_NT > 0, lr, torch.full_like(lr, math.inf))  # padding never wins the min
    prefix = torch.cummin(lr, dim=1).values
    log_c = torch.cat([torch.zeros_like(prefix[:, :1]), prefix[:, :-1]], 1)  # min over j < t; c_1 = 1
    if cap:
        log_c = log_c.clamp(max=0.0)
    log_c = torch.where(torch.isfinite(log_c), log_c, 0.0)
    return torch.where(ci.mask_NT > 0, torch.exp(log_c), 1.0), _ones(ci)


def ais_lambda(log_w_M: torch.Tensor, s0: float = 0.1, v0: float = 0.1) -> tuple[float, dict]:
    """AIS mixing coefficient from the valid tokens' log-weights: reliability R = ESS/N =
    (sum w)^2 / (N sum w^2), severity S = mean |log w|, amplification V = Var(w);
    lambda = clip((1 - exp(-S/s0)) (1 - R) (1 - exp(-V/v0)), 0, 1)."""
    if log_w_M.numel() == 0:
        return 0.0, {"R": 1.0, "S": 0.0, "V": 0.0}
    w = torch.exp(log_w_M.double())
    R = float(w.sum() ** 2 / (w.numel() * (w ** 2).sum()))
    S = float(log_w_M.double().abs().mean())
    V = float(w.var(unbiased=False))
    lam = (1 - math.exp(-S / s0)) * (1 - R) * (1 - math.exp(-V / v0))
    return min(max(lam, 0.0), 1.0), {"R": R, "S": S, "V": V}


@register("correction", "ais", provenance="ABS+INF",
          summary="AIS: weight (1-lambda) + lambda min(pi_old/mu, C), lambda from ESS, |log w| and Var(w)")
def ais(ci: CorrectionInput, threshold: float = 2.0, s0: float = 0.1, v0: float = 0.1):
    """AIS, adaptive importance sampling for quantized (FP8) rollouts (arXiv 2605.13907, Huawei/HKU;
    title not recovered here; no code). [ABS: the three diagnostics and the adaptive mix; INF: their
    formulas, the squashes and s0, v0, C, spec C7]
    w_t = pi_train/pi_fp8 = pi_old/mu. Over the valid tokens of the call: R = ESS/N, S = mean|log w|,
    V = Var(w); lambda = clip(g(S)(1 - R)h(V), 0, 1) with g = 1 - exp(-S/s0), h = 1 - exp(-V/v0);
    w~_t = (1 - lambda) + lambda min(w_t, C): lambda = 0 is the uncorrected gradient, 1 full TIS.
    The paper smooths lambda with an EMA; the correction contract is stateless, so lambda is per call
    (no EMA) here [INF]."""
    lr = _log_rho(ci)
    lam, _ = ais_lambda(lr[ci.mask_NT > 0], s0, v0)
    w = (1 - lam) + lam * torch.exp(lr).clamp(max=threshold)
    return torch.where(ci.mask_NT > 0, w, 1.0).float(), _ones(ci)
