"""Policy losses (`--loss`) and loss aggregations (`--loss-agg`), registered by name.

Loss contract: `fn(lp: LossInput, **options) -> (loss_NT, stats)` where loss_NT is the per-token loss
(to be aggregated) and stats holds detached per-token diagnostics, e.g. `clipped_NT` (bool).
Aggregation contract: `fn(loss_NT, mask_NT, totals: AggTotals, **options) -> scalar`. `totals` holds
the token and sequence counts of the whole *minibatch*, so that summing the aggregate over
micro-batches gives exactly the minibatch value (micro-batching changes nothing but memory).

Every loss here is a per-token loss to *minimise*; at ratio 1 its gradient is the plain policy
gradient -A * grad log pi. Correction weights (weight_NT) are detached and multiply the loss
(spec E3: the PPO ratio is the only differentiated ratio). Provenance tags as in core/registry.py.

Safety clamps, as verl 0.9.1: the token log-ratio log(pi_theta/pi_old) is clamped to [-20, 20] before
exp in every token-ratio loss (ppo-clip, dual-clip, no-clip, m2po-clip, cispo), so one stale token
cannot give a loss of 1e26 (ratio e^60 with A < 0 and dual-clip off); beyond the clamp the token has
no gradient. GSPO clamps its sequence log-ratio at 10 (verl). The KL estimators (`kl_penalty`) clamp
as verl's kl_penalty does (k3: log-ratio to [-20, 20], value to [-10, 10]).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..core.registry import register


@dataclass
class LossInput:
    logp_NT: torch.Tensor  # log pi_theta (differentiable)
    old_logp_NT: torch.Tensor  # log pi_old (the proximal policy; detached)
    adv_NT: torch.Tensor  # advantages broadcast to tokens
    mask_NT: torch.Tensor  # 1 on response tokens
    weight_NT: torch.Tensor | None = None  # off-policy correction weights (detached), multiply the loss


@dataclass
class AggTotals:
    tokens: int  # response tokens in the minibatch
    seqs: int  # sequences in the minibatch


LOG_RATIO_BOUND = 20.0  # verl's clamp on log(pi_theta/pi_old) before exp (e^20 = 4.9e8)


def _weighted(loss: torch.Tensor, lp: LossInput) -> torch.Tensor:
    return loss if lp.weight_NT is None else loss * lp.weight_NT


def _ratio(lp: LossInput) -> torch.Tensor:
    """pi_theta/pi_old per token, its log clamped to +-LOG_RATIO_BOUND (verl)."""
    return torch.exp((lp.logp_NT - lp.old_logp_NT).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))


def _clipped(ratio, adv, clip_low, clip_high):
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    return torch.maximum(unclipped, clipped), (clipped > unclipped)


@register("loss", "ppo-clip", provenance="CODE",
          summary="PPO clipped surrogate with asymmetric clip (clip-higher: clip_high > clip_low)")
def ppo_clip(lp: LossInput, clip_low: float = 0.2, clip_high: float = 0.28):
    """PPO-clip (Schulman et al., 2017, "Proximal Policy Optimization Algorithms", arXiv 1707.06347)
    with DAPO's decoupled clip-higher bounds (Yu et al., 2025, "DAPO: An Open-Source LLM Reinforcement
    Learning System at Scale", arXiv 2503.14476). [CODE: verl core_algos compute_policy_loss]
    L = -min(r A, clip(r, 1-eps_low, 1+eps_high) A), r = pi_theta/pi_old (log r clamped to +-20, verl).
    verl's `vanilla` loss always adds the dual clip for A < 0 (clip_ratio_c = 3); this is it with the
    dual clip off (see `dual-clip`). With old = pi_prox and the `areal-decoupled` correction weight
    this is AReaL's decoupled objective (spec C3)."""
    ratio = _ratio(lp)
    loss, clipped = _clipped(ratio, lp.adv_NT, clip_low, clip_high)
    return _weighted(loss, lp), {"clipped_NT": clipped.detach(), "ratio_NT": ratio.detach()}


@register("loss", "dual-clip", provenance="CODE",
          summary="dual-clip PPO: for A < 0 the loss is also capped at -c*A (c > 1)")
def dual_clip(lp: LossInput, clip_low: float = 0.2, clip_high: float = 0.28, clip_c: float = 3.0):
    """Dual-clip PPO (Ye et al., 2020, "Mastering Complex Control in MOBA Games with Deep Reinforcement
    Learning", arXiv 1912.09729). [CODE: verl core_algos compute_policy_loss, clip_ratio_c]
    L1 = max(-A r, -A clip(r, 1-eps_low, 1+eps_high)); for A < 0: L = min(L1, -c A), else L1.
    Bounds the loss (and kills the gradient) of negative-advantage tokens whose ratio exploded, e.g.
    stale off-policy tokens. verl's default c = 3; CoPRIS/TreePO recipes use c = 10."""
    if clip_c <= 1:
        raise ValueError("dual-clip: clip_c must be > 1")
    ratio = _ratio(lp)
    adv = lp.adv_NT
    l1, clipped = _clipped(ratio, adv, clip_low, clip_high)
    l3 = -adv * clip_c
    loss = torch.where(adv < 0, torch.minimum(l1, l3), l1)
    lower = (adv < 0) & (l1 > l3)
    return _weighted(loss, lp), {"clipped_NT": (clipped | lower).detach(), "clipped_lower_NT": lower.detach(),
                                 "ratio_NT": ratio.detach()}


@register("loss", "gspo", provenance="CODE",
          summary="GSPO: sequence-level ratio (geometric mean of token ratios), clipped per sequence")
def gspo(lp: LossInput, clip_low: float = 3e-4, clip_high: float = 4e-4, max_log_ratio: float = 10.0):
    """GSPO (Zheng et al., 2025, "Group Sequence Policy Optimization", arXiv 2507.18071).
    [CODE: verl core_algos compute_policy_loss_gspo]
    s_i = exp((1/|o_i|) sum_t log(pi_theta/pi_old)_{i,t}) over the response mask. Token form:
    log s_{i,t} = sg(log s_i) + log pi_theta(o_t) - sg(log pi_theta(o_t)), clamped at max_log_ratio,
    so every token carries the value s_i and the gradient s_i grad log pi(o_t);
    L_{i,t} = max(-A s_{i,t}, -A clip(s_{i,t}, 1-eps_l, 1+eps_h)). Use with
    `--loss-agg seq-mean-token-mean` (verl forces it), which makes the per-sequence gradient
    A s_i grad log s_i. Defaults eps_l = 3e-4, eps_h = 4e-4 (verl example). Token-level TIS weights
    multiply per token; spec E3 warns GSPO is sequence-level, so prefer a sequence-level correction.
    """
    m = lp.mask_NT.float()
    log_ratio = (lp.logp_NT - lp.old_logp_NT) * m
    seq_log = log_ratio.sum(1) / m.sum(1).clamp(min=1)
    log_s = (seq_log.detach()[:, None] + lp.logp_NT - lp.logp_NT.detach()).clamp(max=max_log_ratio)
    s = torch.exp(log_s)
    loss, clipped = _clipped(s, lp.adv_NT, clip_low, clip_high)
    return _weighted(loss, lp), {"clipped_NT": clipped.detach(), "ratio_NT": s.detach()}


@register("loss", "no-clip", provenance="CODE",
          summary="unclipped importance-weighted PG, -r A (M2PO's objective: the trust region is the mask)")
def no_clip(lp: LossInput):
    """Unclipped surrogate L = -A r, r = pi_theta/pi_old. M2PO ("Prosperity before Collapse: How Far Can
    Off-Policy RL Reach with Stale Data on LLMs?", arXiv 2510.01161) trains this with the `m2po`
    token mask instead of a PPO clip [CODE: AReaL actor m2po path; spec C4]."""
    ratio = _ratio(lp)
    return _weighted(-lp.adv_NT * ratio, lp), {"clipped_NT": torch.zeros_like(ratio, dtype=torch.bool),
                                              "ratio_NT": ratio.detach()}


@register("loss", "cispo", provenance="CODE+INF",
          summary="CISPO: -sg(clip(r, 1-eps_l, 1+eps_h)) A log pi; every token keeps its gradient")
def cispo(lp: LossInput, clip_low: float = 1.0, clip_high: float = 0.28):
    """CISPO (MiniMax, 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning
    Attention", arXiv 2506.13585). [CODE: verl core_algos compute_policy_loss_cispo]
    L = -sg(clip(r, 1-eps_low, 1+eps_high)) A log pi_theta, r = pi_theta/pi_old (log r clamped to +-20).
    PPO's clip zeroes the gradient of a clipped token, so rare high-ratio tokens ("However", "Wait")
    stop learning after one update; CISPO clips the detached IS weight instead and keeps every token's
    gradient w A grad log pi. The loss *value* is -w A log pi (verl's), not -w A.
    Defaults [INF]: clip_low = 1 (no lower bound: the paper sets eps_low large and tunes only eps_high),
    clip_high = 0.28 (rollwise's clip-higher; the paper's value is not recorded here)."""
    ratio = _ratio(lp)
    clipped_ratio = ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = -clipped_ratio.detach() * lp.adv_NT * lp.logp_NT
    return _weighted(loss, lp), {"clipped_NT": (ratio != clipped_ratio).detach(), "ratio_NT": ratio.detach()}


@register("loss", "gpg", provenance="CODE",
          summary="GPG: plain policy gradient -A log pi (no ratio, no clip)")
def gpg(lp: LossInput):
    """GPG (Chu et al., 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model
    Reasoning", arXiv 2504.02546). [CODE: verl core_algos compute_policy_loss_gpg]
    L = -A log pi_theta: the REINFORCE objective itself, no surrogate, no trust region; meant for one
    on-policy step per batch (minibatches=1, epochs=1), where pi_old = pi_theta. Pair with the `gpg`
    advantage. The loss value is -A log pi, not -A."""
    loss = -lp.adv_NT * lp.logp_NT
    return _weighted(loss, lp), {"clipped_NT": torch.zeros_like(loss, dtype=torch.bool)}


def m2po_tau(delta2: torch.Tensor, budget: float) -> float:
    """The tau with mean(min(delta2, tau^2)) = budget (exact piecewise-linear solve); inf when
    mean(delta2) <= budget (nothing needs clipping), 0 when budget <= 0."""
    n = delta2.numel()
    if n == 0 or float(delta2.mean()) <= budget:
        return math.inf
    if budget <= 0:
        return 0.0
    v = delta2.double().sort().values
    below = torch.cat([torch.zeros(1, dtype=torch.float64, device=v.device), v.cumsum(0)[:-1]])  # sum of the j smallest
    j = torch.arange(n, dtype=torch.float64, device=v.device)
    s = (n * budget - below) / (n - j)  # tau^2 if exactly j values lie below it
    lo = torch.cat([torch.zeros(1, dtype=torch.float64, device=v.device), v[:-1]])
    ok = (s >= lo - 1e-12) & (s <= v + 1e-12)
    return float(s[ok.nonzero()[0, 0]].clamp(min=0).sqrt())


@register("loss", "m2po-clip", provenance="CODE",
          summary="M2PO official-repo variant: clip bounds from a second-moment budget on harmful tokens")
def m2po_clip(lp: LossInput, budget: float = 0.04, min_clip_low: float = 0.3, min_clip_high: float = 0.5):
    """M2PO, official-repo variant ("Prosperity before Collapse: How Far Can Off-Policy RL Reach with
    Stale Data on LLMs?", arXiv 2510.01161). [CODE: Infini-AI-Lab/M2PO core_algos
    compute_m2po_policy_loss, kpo_clip_harmful_tokens] The paper's masking form is the `m2po`
    correction + `no-clip` loss; this is the repo's clipping form.
    Harmful tokens: (A > 0 and r > 1) or (A < 0 and r < 1), r = pi_theta/pi_old,
    Delta = log pi_old - log pi_theta. Find tau with mean(min(Delta^2, tau^2)) = budget over the harmful
    tokens (no clipping when their mean Delta^2 is already <= budget); clip_low = 1 - e^-tau,
    clip_high = e^tau - 1, each raised to at least min_clip_low / min_clip_high; then PPO-clip.
    Bug in the official release: `_solve_tau_from_sorted_delta2` returns the breakpoint *below* the
    solution (and a bare number instead of a tuple on one branch); the exact tau is used here.
    tau is computed over the tokens of the call (the micro-batch)."""
    ratio = _ratio(lp)
    with torch.no_grad():
        a, m = lp.adv_NT, lp.mask_NT > 0
        harmful = m & (((a > 1e-12) & (ratio > 1 + 1e-12)) | ((a < -1e-12) & (ratio < 1 - 1e-12)))
        tau = m2po_tau(((lp.old_logp_NT - lp.logp_NT) ** 2)[harmful], budget)
        clip_low = max(1 - math.exp(-tau), min_clip_low)
        clip_high = max(math.expm1(tau) if tau < 700 else math.inf, min_clip_high)
    loss, clipped = _clipped(ratio, lp.adv_NT, clip_low, clip_high)
    return _weighted(loss, lp), {"clipped_NT": clipped.detach(), "ratio_NT": ratio.detach(),
                                 "clip_low": clip_low, "clip_high": clip_high}


# ---- KL(pi_theta || pi_ref) estimators (the learner's `kl_estimator`) ---------------------------

def _kl_forward(logp_NT: torch.Tensor, ref_NT: torch.Tensor, name: str) -> torch.Tensor:
    if name in ("k1", "kl"):
        return logp_NT - ref_NT
    if name == "abs":
        return (logp_NT - ref_NT).abs()
    if name in ("k2", "mse"):
        return 0.5 * (logp_NT - ref_NT) ** 2
    if name in ("k3", "low_var_kl"):
        d = (ref_NT - logp_NT).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
        return (torch.exp(d) - d - 1).clamp(-10.0, 10.0)
    raise ValueError(f"unknown kl_estimator {name!r}; expected one of {', '.join(KL_ESTIMATORS)}")


KL_ESTIMATORS = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k1+", "kl+", "abs+", "k3+", "low_var_kl+")


def kl_penalty(logp_NT: torch.Tensor, ref_NT: torch.Tensor, name: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from the sampled tokens' log-probs, named as verl's
    `kl_penalty` / `kl_loss_type` (Schulman 2020, "Approximating KL Divergence").
    [CODE: verl core_algos kl_penalty, kl_penalty_forward] With d = log pi_ref - log pi_theta:
      k1 / kl:          -d (unbiased value; its gradient has expectation 0: no pull towards ref);
      abs:              |d|;
      k2 / mse:         d^2 / 2 (biased value; its gradient is the true KL gradient on-policy);
      k3 / low_var_kl:  e^d - d - 1 >= 0 (unbiased, low variance), d clamped to [-20, 20] and the value
                        to at most 10, as verl: the cap bounds e^d when pi_ref >> pi_theta, but a token
                        with d > 2.61 or d < -11.0 (pi_theta/pi_ref > 6e4) then gets no KL gradient;
      a trailing "+" (k1+, k3+, ...): that value, with k2's gradient (straight-through).
    """
    if name.endswith("+") and name[:-1] not in ("k2", "mse"):
        value = _kl_forward(logp_NT, ref_NT, name[:-1])
        k2 = 0.5 * (logp_NT - ref_NT) ** 2
        return k2 - k2.detach() + value.detach()
    return _kl_forward(logp_NT, ref_NT, name.rstrip("+"))


# ---- aggregations -----------------------------------------------------------------------------

@register("aggregation", "token-mean", provenance="CODE",
          summary="sum of per-token losses / tokens in the minibatch")
def token_mean(loss_NT, mask_NT, totals: AggTotals):
    """Every token of the minibatch weighs the same (DAPO, arXiv 2503.14476). [CODE: verl agg_loss
    token-mean] (1/sum_i |o_i|) sum_i sum_t l_{i,t}."""
    return (loss_NT * mask_NT).sum() / max(totals.tokens, 1)


@register("aggregation", "token-sum", provenance="CODE",
          summary="sum of per-token losses (no normalisation): the gradient grows with the token count")
def token_sum(loss_NT, mask_NT, totals: AggTotals):
    """sum_i sum_t l_{i,t}, unnormalised. [CODE: verl agg_loss token-sum] Longer responses and bigger
    batches give proportionally bigger gradients; scale lr (or use grad clipping) accordingly."""
    return (loss_NT * mask_NT).sum()


@register("aggregation", "seq-mean-token-mean", provenance="CODE",
          summary="mean over sequences of each sequence's token mean (GRPO, GSPO)")
def seq_mean_token_mean(loss_NT, mask_NT, totals: AggTotals):
    """GRPO's (1/G) sum_i (1/|o_i|) sum_t l_{i,t} (arXiv 2402.03300; GSPO arXiv 2507.18071).
    [CODE: verl agg_loss seq-mean-token-mean] The sequence count is the minibatch's (totals.seqs), so
    micro-batch sums equal the minibatch value; a sequence with no tokens contributes 0."""
    per_seq = (loss_NT * mask_NT).sum(1) / mask_NT.sum(1).clamp(min=1)
    return per_seq.sum() / max(totals.seqs, 1)


@register("aggregation", "seq-mean-token-sum-norm", provenance="CODE",
          summary="Dr. GRPO: token sums / (sequences * constant L); L = max_len (the generation budget)")
def seq_mean_token_sum_norm(loss_NT, mask_NT, totals: AggTotals, max_len: int | None = None):
    """Dr. GRPO (arXiv 2503.20783): J = (1/G) sum_i sum_t l_{i,t} / L with a constant L, which removes
    GRPO's length bias (long wrong answers no longer get diluted penalties). [CODE: verl agg_loss
    seq-mean-token-sum-norm] Set max_len to the generation budget (max new tokens). Without it the
    padded width of the call is used, as verl does (its own TODO notes this divisor is not constant);
    that width varies between micro-batches, so pass max_len whenever micro-batching is on.
    Like verl (its loss_scale_factor is L), this divides by the sequence count and by L."""
    L = max_len if max_len is not None else mask_NT.shape[1]
    return (loss_NT * mask_NT).sum() / (max(totals.seqs, 1) * max(L, 1))


@register("aggregation", "constant", provenance="ABS+INF",
          summary="AsyncWebRL: per-trajectory 1/k constant instead of 1/|trajectory| (k = horizon)")
def constant(loss_NT, mask_NT, totals: AggTotals, k: float = 1.0):
    """AsyncWebRL's constant normaliser (arXiv 2606.05597; title not recovered here; code on the
    microsoft/webgym async branch, not read). [ABS: the rule; INF: k and the single-step reading]
    Multi-step GRPO weighs trajectory i by (1/|tau_i|) sum_s l_s (l_s: token mean of step s); AsyncWebRL
    replaces 1/|tau_i| by a constant 1/k, so long failed trajectories keep their full negative gradient.
    rollwise rows are single steps (one row = one step = one trajectory), so this is
    sum_rows tokenmean(row) / (k * totals.seqs): seq-mean-token-mean scaled by 1/k. Multi-step
    trajectories would need a trajectory count per minibatch, which the contract does not carry yet.
    k is "a constant" in the paper (the horizon H or a typical length; value unknown)."""
    if k <= 0:
        raise ValueError("constant: k must be > 0")
    per_step = (loss_NT * mask_NT).sum(1) / mask_NT.sum(1).clamp(min=1)
    return per_step.sum() / (k * max(totals.seqs, 1))
