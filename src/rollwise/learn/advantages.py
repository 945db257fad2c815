"""Advantage estimators, registered by name (`--advantage`).

Contract: `fn(inp: AdvInput, **options) -> Tensor` of shape [N] (one value per rollout, broadcast
over its tokens) or [N, T] (token-level, e.g. KTAE). Groups may have any size, including 1.

Conventions shared by every estimator here:
- A group of one rollout has no within-group baseline: its group-relative advantage is 0 (verl gives
  mean 0, std 1, i.e. A = r, for singleton groups; spec D1 asks to guard against that).
- Group statistics are computed in float64 and the result is cast back to the rewards' dtype (float32
  from `batch_input`). A group whose rewards are all equal (`Group.zero_variance`) gets exactly 0 from
  every estimator with a group baseline: in float32 the mean of eight 0.7s is not 0.7, and dividing
  that rounding error by (std + eps) gave all-equal groups advantages up to 0.19 that `drop_zero_adv`
  then kept. (Estimators that whiten over the whole batch afterwards, gd2po and reinforce++-baseline,
  shift those zeros by the batch mean, as verl does.)
- `@register(..., needs_groups=True)`: the estimator compares the rollouts of a group, so a run with n < 2
  is refused when its config loads; `needs_groups=False`: it learns from single rollouts.
- `batch_input(batch)` fills every input a Batch itself holds: PVPO's reference pass rates when a
  planner measured them, GD2PO's reward components when every rollout carries them, TreePO's node
  paths (`Rollout.lineage.tree_path`). State kept across
  batches (MSSR's tracked baseline) comes from a *tracker* the estimator declares with `@tracks`; the
  learner owns it (see `tracks`). An estimator whose input is missing raises ValueError naming it.
- Provenance tags: CODE = official code read, ABS = paper abstract, SEC = secondary summary,
  INF = inferred by rollwise (see core/registry.py).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ..core.registry import register
from ..core.types import Batch


@dataclass
class AdvInput:
    rewards_N: torch.Tensor  # float rewards, one per rollout
    group_N: torch.Tensor  # long group index in [0, G); rollouts of one prompt share it
    mask_NT: torch.Tensor | None = None  # 1 on response tokens (for token-level estimators)
    token_ids_NT: torch.Tensor | None = None
    entropy_NT: torch.Tensor | None = None  # per-token entropy of the sampling distribution
    ref_pass_rate_G: torch.Tensor | None = None  # a reference policy's pass rate per group (PVPO)
    reward_parts_NK: torch.Tensor | None = None  # several reward components per rollout (GD2PO)
    baseline_G: torch.Tensor | None = None  # a per-group value baseline kept outside the batch (MSSR)
    tree_path_N: list[tuple] | None = None  # each rollout's node path in its prompt's tree (TreePO); () if none

    @property
    def num_groups(self) -> int:
        return int(self.group_N.max().item()) + 1 if self.group_N.numel() else 0


def batch_input(batch: Batch) -> AdvInput:
    """The AdvInput of a batch, with everything the batch itself holds: per-token entropies of the
    sampling distribution as the engine recorded them (a rollout without them, e.g. one restored from
    an old checkpoint, repeats its mean). ref_pass_rate_G is set when a planner measured a reference
    pass rate for the groups (`Group.meta["ref_pass_rate"]`, PVPO's anchor);
    reward_parts_NK when every rollout carries reward components (`Rollout.reward_parts`)."""
    rollouts = batch.rollouts
    pad = lambda xs: torch.nn.utils.rnn.pad_sequence([x.float() for x in xs], batch_first=True)  # noqa: E731
    # batch data: built on the CPU (the learner moves what meets the model to its device)
    ref_G = torch.tensor([float(g.meta.get("ref_pass_rate", float("nan"))) for g in batch.groups], device="cpu")
    parts = [r.reward_parts for r in rollouts]
    if parts and all(p is not None for p in parts):
        if len({len(p) for p in parts}) > 1:
            raise ValueError("rollouts of one batch carry different numbers of reward components")
        parts_NK = torch.tensor(parts, dtype=torch.float32, device="cpu")
    else:
        parts_NK = None  # a scalar-reward batch (or a mixed one): multi-reward estimators will say so
    return AdvInput(
        rewards_N=torch.tensor([r.reward for r in rollouts], dtype=torch.float32, device="cpu"),
        group_N=torch.tensor([gi for gi, g in enumerate(batch.groups) for _ in g.rollouts], dtype=torch.long,
                             device="cpu"),
        mask_NT=pad([torch.ones(r.num_tokens, device="cpu") for r in rollouts]),
        token_ids_NT=pad([r.token_ids_T for r in rollouts]).long(),
        entropy_NT=pad([r.entropy_T if getattr(r, "entropy_T", None) is not None
                        else torch.full((r.num_tokens,), r.entropy, device="cpu") for r in rollouts]),
        ref_pass_rate_G=None if ref_G.isnan().all() else ref_G,
        reward_parts_NK=parts_NK,
        tree_path_N=[tuple(getattr(getattr(r, "lineage", None), "tree_path", None) or ()) for r in rollouts])


def tracks(factory):
    """Declare that an estimator needs state kept across batches, e.g. MSSR's per-prompt baseline.

    The learner builds one `factory(**advantage_options["tracker"])` per run and, for every batch,
    calls `inp = tracker.fill(inp, batch)` before the estimator (the state from *earlier* batches only)
    and `tracker.observe(batch)` after it (this batch's outcomes, for later batches). The tracker's
    state_dict()/load_state_dict() are part of the learner's checkpoint, so a resumed run continues
    exactly. Called directly, such an estimator needs the caller to fill that input itself.
    """
    def deco(fn):
        fn.tracker = factory
        return fn

    return deco


def group_mean(x_N: torch.Tensor, group_N: torch.Tensor, G: int) -> torch.Tensor:
    """Per-rollout mean of x over its group, in x's dtype (estimators pass float64)."""
    s = torch.zeros(G, dtype=x_N.dtype, device=x_N.device).index_add_(0, group_N, x_N)
    c = torch.zeros(G, dtype=x_N.dtype, device=x_N.device).index_add_(0, group_N, torch.ones_like(x_N))
    return (s / c.clamp(min=1))[group_N]


def group_std(x_N: torch.Tensor, group_N: torch.Tensor, G: int) -> torch.Tensor:
    """Per-rollout unbiased std of x over its group (0 for groups of one)."""
    mean = group_mean(x_N, group_N, G)
    sq = torch.zeros(G, dtype=x_N.dtype, device=x_N.device).index_add_(0, group_N, (x_N - mean) ** 2)
    c = torch.zeros(G, dtype=x_N.dtype, device=x_N.device).index_add_(0, group_N, torch.ones_like(x_N))
    return (sq / (c - 1).clamp(min=1)).sqrt()[group_N]


def group_flat(x_N: torch.Tensor, group_N: torch.Tensor, G: int) -> torch.Tensor:
    """Per-rollout bool: every value of its group is equal (exactly, as `Group.zero_variance` tests)."""
    hi = torch.full((G,), -math.inf, dtype=x_N.dtype, device=x_N.device).scatter_reduce(0, group_N, x_N, "amax")
    lo = torch.full((G,), math.inf, dtype=x_N.dtype, device=x_N.device).scatter_reduce(0, group_N, x_N, "amin")
    return (hi == lo)[group_N]


def _as_rewards(adv: torch.Tensor, inp: AdvInput) -> torch.Tensor:
    """An advantage computed in float64, back in the dtype of the rewards (float32 from batch_input)."""
    return adv.to(inp.rewards_N.dtype if inp.rewards_N.is_floating_point() else torch.float32)


def masked_whiten(x_NT: torch.Tensor, mask_NT: torch.Tensor) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over the masked tokens of the whole batch, unbiased variance, as
    verl's masked_whiten (without its 1e-8 in the mean's denominator). Fewer than two tokens: all 0
    (verl raises)."""
    m = mask_NT.to(x_NT.dtype)
    n = m.sum()
    if n < 2:
        return torch.zeros_like(x_NT)
    mean = (x_NT * m).sum() / n
    var = ((x_NT - mean) ** 2 * m).sum() / (n - 1)
    return (x_NT - mean) * torch.rsqrt(var + 1e-8)


def group_rows(group_N: torch.Tensor, G: int) -> list[torch.Tensor]:
    """Row indices of each group, in batch order."""
    return [(group_N == g).nonzero(as_tuple=True)[0] for g in range(G)]


def _require(inp: AdvInput, field: str, method: str, how: str) -> torch.Tensor:
    v = getattr(inp, field)
    if v is None:
        raise ValueError(f"advantage {method!r} needs AdvInput.{field}: {how}")
    return v


# ---- group-mean family ---------------------------------------------------------------------

@register("advantage", "grpo", needs_groups=True, provenance="CODE",
          summary="GRPO: (r - group mean) / (group std + eps); scale_std=False drops the std")
def grpo(inp: AdvInput, scale_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """GRPO (Shao et al., 2024, "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
    Language Models", arXiv 2402.03300). [CODE: verl core_algos compute_grpo_outcome_advantage]
    A_i = (r_i - mean_g) / (std_g + eps), std unbiased. Singleton groups get 0 (verl: A = r); all-equal
    groups exactly 0 (float64 statistics, see the module notes)."""
    return _as_rewards(_grpo64(inp.rewards_N.double(), inp.group_N, inp.num_groups, scale_std, eps), inp)


def _grpo64(r: torch.Tensor, g: torch.Tensor, G: int, scale_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    adv = r - group_mean(r, g, G)
    if scale_std:
        adv = adv / (group_std(r, g, G) + eps)
    return adv.masked_fill(group_flat(r, g, G), 0.0)


@register("advantage", "dr-grpo", needs_groups=True, provenance="CODE",
          summary="Dr. GRPO: r - group mean, no std division (pair with seq-mean-token-sum-norm)")
def dr_grpo(inp: AdvInput) -> torch.Tensor:
    """Dr. GRPO (Liu et al., 2025, "Understanding R1-Zero-Like Training: A Critical Perspective",
    arXiv 2503.20783). [CODE: verl compute_grpo_outcome_advantage with norm_adv_by_std_in_grpo=False]
    A_i = r_i - mean_g r. Dropping the std removes the difficulty bias (low-std groups inflated); the
    length bias is removed by the `seq-mean-token-sum-norm` aggregation (constant L)."""
    return grpo(inp, scale_std=False)


@register("advantage", "rloo", needs_groups=True, provenance="CODE+INF",
          summary="RLOO: r_i - mean of the other rollouts of the group = n/(n-1) (r_i - mean)")
def rloo(inp: AdvInput) -> torch.Tensor:
    """RLOO (Ahmadian et al., 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for
    Learning from Human Feedback in LLMs", arXiv 2402.14740). [CODE: verl compute_rloo_outcome_advantage]
    Leave-one-out baseline: A_i = r_i - (1/(n-1)) sum_{j != i} r_j = n/(n-1) (r_i - mean_g).
    Singleton groups get 0 [INF; verl gives A = r]."""
    r, g, G = inp.rewards_N.double(), inp.group_N, inp.num_groups
    n = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, g, torch.ones_like(r))[g]
    adv = torch.where(n > 1, (r - group_mean(r, g, G)) * n / (n - 1).clamp(min=1), torch.zeros_like(r))
    return _as_rewards(adv.masked_fill(group_flat(r, g, G), 0.0), inp)


@register("advantage", "gpg", needs_groups=True, provenance="CODE",
          summary="GPG: alpha (r - group mean) / f_norm, alpha = N / #rollouts with a nonzero reward")
def gpg(inp: AdvInput, f_norm: float = 1.0) -> torch.Tensor:
    """GPG (Chu et al., 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline for Model
    Reasoning", arXiv 2504.02546). [CODE: verl core_algos compute_gpg_outcome_advantage]
    A_i = alpha (r_i - mean_g) / f_norm with alpha = N / max(#{i: r_i != 0}, 1) over the whole batch: the
    paper's rescaling that keeps the gradient from shrinking when many rollouts carry no signal, as
    verl's code computes it (it counts nonzero *rewards*; for 0/1 rewards, the correct rollouts).
    No std division. Pair with the `gpg` loss (-A log pi, no ratio, no clip). Singleton and all-equal
    groups get 0 (verl: singletons A = alpha r)."""
    r, g, G = inp.rewards_N.double(), inp.group_N, inp.num_groups
    alpha = r.numel() / max(int(torch.count_nonzero(r)), 1)
    adv = (alpha * (r - group_mean(r, g, G)) / f_norm).masked_fill(group_flat(r, g, G), 0.0)
    return _as_rewards(adv, inp)


# ---- batch-whitened: REINFORCE++ -------------------------------------------------------------

def _token_mask(inp: AdvInput) -> torch.Tensor:
    """The response mask, float64; without one every rollout is a single token."""
    if inp.mask_NT is None:
        return torch.ones(inp.rewards_N.numel(), 1, dtype=torch.float64, device=inp.rewards_N.device)
    return inp.mask_NT.double()


@register("advantage", "reinforce++", needs_groups=False, provenance="CODE",
          summary="REINFORCE++: discounted return of the outcome reward, whitened over the batch's tokens")
def reinforce_pp(inp: AdvInput, gamma: float = 1.0) -> torch.Tensor:
    """REINFORCE++ (Hu, 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large Language
    Models", arXiv 2501.03262). [CODE: verl core_algos compute_reinforce_plus_plus_outcome_advantage]
    The outcome reward sits on the last response token; the return of token t of rollout i is
    G_{i,t} = gamma^(|o_i| - 1 - t) r_i, then A = (G - mean) / sqrt(var + 1e-8) with the mean and the
    unbiased variance over every response token of the batch (global, not per group: no group baseline).
    gamma = 1 (verl's default) gives each rollout one value, r_i whitened with token weights. Returns
    [N, T]. verl folds a KL reward into r when it uses a reward-side KL; rollwise's KL is a loss term."""
    m = _token_mask(inp)
    t_NT = torch.arange(m.shape[1], dtype=torch.float64, device=m.device).expand_as(m)
    to_go_NT = (m.sum(1, keepdim=True) - 1 - t_NT).clamp(min=0)  # tokens after t in the response
    returns_NT = inp.rewards_N.double()[:, None] * gamma ** to_go_NT * m
    return _as_rewards(masked_whiten(returns_NT, m) * m, inp)


@register("advantage", "reinforce++-baseline", needs_groups=True, provenance="CODE",
          summary="REINFORCE++-baseline: r - group mean, then whitened over the batch's tokens")
def reinforce_pp_baseline(inp: AdvInput) -> torch.Tensor:
    """REINFORCE++ with a group baseline (Hu, 2025, arXiv 2501.03262, "REINFORCE++-baseline").
    [CODE: verl core_algos compute_reinforce_plus_plus_baseline_outcome_advantage]
    A = whiten(r_i - mean_g) over every response token of the batch (token-weighted mean, unbiased
    variance, + 1e-8). The group mean removes the prompt's difficulty, the global whitening sets the
    scale, so an easy prompt's small spread is not inflated as in GRPO's per-group std. Returns [N, T].
    Singleton groups are centred to 0 before whitening (verl: r). Note: whitening subtracts the batch
    mean, so rows of an all-equal group get -mean/std, usually small but not 0, as in verl; they are
    not dropped by `drop_zero_adv`."""
    r, g, G = inp.rewards_N.double(), inp.group_N, inp.num_groups
    centred_N = (r - group_mean(r, g, G)).masked_fill(group_flat(r, g, G), 0.0)
    m = _token_mask(inp)
    return _as_rewards(masked_whiten(centred_N[:, None] * m, m) * m, inp)


@register("advantage", "treepo", provenance="CODE",
          summary="TreePO: r minus the mean of every subtree sharing the leaf's prefix, averaged, then whitened")
def treepo(inp: AdvInput, weight: str = "average", skip_flat: bool = False) -> torch.Tensor:
    """TreePO's tree-based advantage (Li et al., 2025, "TreePO: Bridging the Gap of Policy Optimization
    and Efficacy and Inference Efficiency with Heuristic Tree-based Modeling", arXiv 2508.17445).
    [CODE: multimodal-art-projection/TreePO verl/trainer/ppo/core_algos.py,
    compute_tree_reinforce_plus_plus_baseline_outcome_advantage]

    Leaf i of a prompt's tree has the node path p_i = (root sample, branch, branch, ...)
    (`Rollout.lineage.tree_path`, set by the `treepo` planner). For depth d = 0 (the whole group) and
    every d >= 1 whose subgroup S_d(i) = {leaves j of the group with p_j[:d] = p_i[:d]} has more than one
    leaf, the term r_i - mean_{S_d(i)} r; with `weight` "average" (the recipe's setting, B2 (d)) A_i is
    the mean of the terms, with "group_size" their mean weighted by |S_d(i)| (the function's default).
    `skip_flat` leaves out subgroups (d >= 1) whose rewards are all equal (remove_no_std_subgroup). Then
    A is whitened over every response token of the batch, as REINFORCE++-baseline. Returns [N, T].
    A rollout without a path (not from a tree) has only the d = 0 term: on plain groups this is
    reinforce++-baseline, except that a singleton group is centred to 0 (the code keeps r)."""
    if weight not in ("average", "group_size"):
        raise ValueError(f"treepo advantage: weight must be 'average' or 'group_size', got {weight!r}")
    r, g, G = inp.rewards_N.double(), inp.group_N, inp.num_groups
    paths = inp.tree_path_N or [()] * r.numel()
    # d = 0: the group mean (0 for a group of one or an all-equal group, as every estimator here)
    terms = [[(float(x), float(k))] for x, k in zip(
        (r - group_mean(r, g, G)).masked_fill(group_flat(r, g, G), 0.0).tolist(),
        torch.bincount(g, minlength=G)[g].tolist())]
    subgroups: dict = {}  # (group, d, path prefix) -> leaf indices
    for i, (gi, p) in enumerate(zip(g.tolist(), paths)):
        for d in range(1, len(p)):  # d = len(p) would be the leaf alone
            subgroups.setdefault((gi, p[:d]), []).append(i)
    for rows in subgroups.values():
        if len(rows) < 2:
            continue
        vals = r[rows]
        if skip_flat and bool((vals == vals[0]).all()):
            continue
        mean = float(vals.mean())
        for i in rows:
            terms[i].append((float(r[i]) - mean, float(len(rows))))
    if weight == "average":
        adv_N = torch.tensor([sum(t for t, _ in ts) / len(ts) for ts in terms], dtype=torch.float64,
                             device=inp.rewards_N.device)
    else:
        adv_N = torch.tensor([sum(t * k for t, k in ts) / sum(k for _, k in ts) for ts in terms], dtype=torch.float64,
                             device=inp.rewards_N.device)
    m = _token_mask(inp)
    return _as_rewards(masked_whiten(adv_N[:, None] * m, m) * m, inp)


# ---- robust baselines ----------------------------------------------------------------------

@register("advantage", "mc-grpo", needs_groups=True, provenance="CODE+INF",
          summary="MC-GRPO: (r - median) / (MAD + 1e-3), the median rollout (pivot) gets 0")
def mc_grpo(inp: AdvInput, mad_eps: float = 1e-3, mad_zero: str = "eps") -> torch.Tensor:
    """MC-GRPO, median-centred GRPO with G+1 rollouts and the pivot excluded (arXiv 2601.22582; title
    not recovered here). [CODE: lotusroot-kim/MC-GRPO grpo_trainer_math.py, via the spec D5]

    Per group: m = median(r), MAD = median(|r - m|), A_i = (r_i - m) / (MAD + mad_eps); no std scaling.
    The pivot (the rollout whose reward is the median; first index among ties) gets A = 0 *after* m
    and MAD are computed (spec E4), so G of the G+1 rollouts carry gradient. The learner's
    `drop_zero_adv` (default on) then removes the pivot from the loss and its denominators
    (unless kl_coef > 0: the pivot then still carries the KL gradient).

    mad_zero chooses what happens when MAD = 0 but r != m (binary rewards, the common case):
      "eps"  (official): divide by mad_eps, |A| = 1/mad_eps = 1000; finite but large, interacts with
             grad clipping and KL [spec D5 edge case];
      "sign" [INF]: A = sign(r - m);
      "std"  [INF]: divide by the group's unbiased std + 1e-6 instead.
    All-equal groups give A = 0 for everyone (r - m = 0), never NaN.
    Even group sizes [INF]: the method assumes an odd G+1; for even n the lower median is used
    (torch.median), so the pivot is still a real rollout.
    """
    if mad_zero not in ("eps", "sign", "std"):
        raise ValueError(f"mc-grpo: mad_zero must be 'eps', 'sign' or 'std', not {mad_zero!r}")
    r = inp.rewards_N.double()
    adv = torch.zeros_like(r)
    for rows in group_rows(inp.group_N, inp.num_groups):
        x = r[rows]
        m = x.median()
        dev = x - m
        mad = dev.abs().median()
        if mad > 0 or mad_zero == "eps":
            a = dev / (mad + mad_eps)
        elif mad_zero == "sign":
            a = torch.sign(dev)
        else:
            a = dev / (x.std() + 1e-6) if x.numel() > 1 else torch.zeros_like(x)
        a[(x == m).nonzero(as_tuple=True)[0][0]] = 0.0  # the pivot: first index among ties
        adv[rows] = a
    return _as_rewards(adv, inp)


@register("advantage", "gapo", needs_groups=True, provenance="CODE+INF",
          summary="GAPO: baseline = median of the tightest window holding ceil(tau*n) sorted rewards")
def gapo(inp: AdvInput, tau: float = 0.5, find_method: str = "median", scale_std: bool = True,
         eps: float = 1e-6) -> torch.Tensor:
    """GAPO, highest-SNR interval median as the group baseline (arXiv 2510.21830; title not recovered
    here). [CODE: TsingZ0/verl-GAPO core_algos.compute_grpo_outcome_advantage,
    rollout_utils.find_shortest_covering_subarray]

    Per group of n: sort the rewards, k = ceil(n * tau); among the windows of k consecutive sorted
    values take the one with the smallest range (first on ties); Q = its median (find_method="median",
    mean of the two middle values for even k) or its mean (find_method="mean").
    sigma_Q = sqrt(sum_i (r_i - Q)^2 / (n - 1)); A_i = (r_i - Q) / (sigma_Q + eps), or r_i - Q when
    scale_std=False. Singleton groups get 0 [INF; the official code gives Q=0, sigma=1, A=r].
    ceil(n*tau) is rounded to 9 decimals first so 0.3*10 is 3, not 4 [INF].
    """
    if find_method not in ("median", "mean"):
        raise ValueError(f"gapo: find_method must be 'median' or 'mean', not {find_method!r}")
    if not 0 < tau <= 1:
        raise ValueError("gapo: tau must be in (0, 1]")
    r = inp.rewards_N.double()
    adv = torch.zeros_like(r)
    for rows in group_rows(inp.group_N, inp.num_groups):
        n = rows.numel()
        if n < 2:
            continue
        x = r[rows]
        xs = x.sort().values
        k = max(1, math.ceil(round(n * tau, 9)))
        start = int(torch.argmin(xs[k - 1:] - xs[: n - k + 1]))  # argmin returns the first minimum
        win = xs[start: start + k]
        if find_method == "mean":
            q = win.mean()
        else:
            q = win[k // 2] if k % 2 else (win[k // 2 - 1] + win[k // 2]) / 2
        a = x - q
        if scale_std:
            a = a / (((x - q) ** 2).sum() / (n - 1)).sqrt().add(eps)
        adv[rows] = a
    return _as_rewards(adv.masked_fill(group_flat(r, inp.group_N, inp.num_groups), 0.0), inp)


# ---- token-level: KTAE ---------------------------------------------------------------------

def _log_comb(n: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def fisher_two_sided(a, b, c, d) -> torch.Tensor:
    """Two-sided Fisher exact p-value of the 2x2 tables [[a, b], [c, d]] (vectorised, float64):
    the sum of the hypergeometric probabilities P(k) <= P(observed), with scipy's relative tolerance
    1e-7 on the comparison (the KTAE code compares exactly; the tolerance only absorbs rounding)."""
    a, b, c, d = (t.double() for t in (a, b, c, d))
    r1, c1, n = a + b, a + c, a + b + c + d
    kmin, kmax = (r1 + c1 - n).clamp(min=0), torch.minimum(r1, c1)
    ks = torch.arange(int(kmax.max().item()) + 1 if kmax.numel() else 1, dtype=torch.float64, device=a.device)
    valid = (ks[None] >= kmin[:, None]) & (ks[None] <= kmax[:, None])
    k = torch.where(valid, ks[None], kmin[:, None])
    log_den = _log_comb(n, r1)[:, None]
    pk = torch.exp(_log_comb(c1[:, None], k) + _log_comb((n - c1)[:, None], r1[:, None] - k) - log_den)
    p_obs = torch.exp(_log_comb(c1, a) + _log_comb(n - c1, r1 - a) - log_den[:, 0])
    take = valid & (pk <= p_obs[:, None] * (1 + 1e-7))
    return torch.where(take, pk, torch.zeros_like(pk)).sum(1).clamp(max=1.0)


def _h(p: torch.Tensor) -> torch.Tensor:  # -p log2 p with 0 log 0 = 0
    return torch.where(p > 0, -p * torch.log2(p.clamp(min=1e-300)), torch.zeros_like(p))


def information_gain(a, b, c, d) -> torch.Tensor:
    """Information gain (bits) of correctness from "response contains v", per 2x2 table."""
    a, b, c, d = (t.double() for t in (a, b, c, d))
    n = (a + b + c + d).clamp(min=1)
    hy = _h((a + c) / n) + _h((b + d) / n)
    s1, s2 = (a + b), (c + d)
    h1 = torch.where(s1 > 0, _h(a / s1.clamp(min=1)) + _h(b / s1.clamp(min=1)), torch.zeros_like(s1))
    h2 = torch.where(s2 > 0, _h(c / s2.clamp(min=1)) + _h(d / s2.clamp(min=1)), torch.zeros_like(s2))
    return hy - (s1 / n) * h1 - (s2 / n) * h2


def ktae_key_scores(ids_M: torch.Tensor, row_M: torch.Tensor, correct_n: torch.Tensor,
                    alpha: float = 1.0, beta_ig: float = 1.0, tf_term: bool = True, top: float = 1.0,
                    k1: float = 2.0, b: float = 0.5, zero_token_ids=()) -> tuple[torch.Tensor, torch.Tensor]:
    """Key-token scores of one group. ids_M / row_M: token id and response index of every valid
    token; correct_n: bool per response. Returns (unique ids U, K(U)) with K in (-top, top)."""
    U, inv = torch.unique(ids_M, return_inverse=True)
    n = correct_n.numel()
    nc, nw = int(correct_n.sum()), int((~correct_n).sum())
    if nc == 0 or nw == 0 or U.numel() == 0:
        return U, torch.zeros(U.numel(), dtype=torch.float64, device=U.device)
    present = torch.zeros(n, U.numel(), dtype=torch.bool, device=U.device)
    present[row_M, inv] = True
    a = present[correct_n].sum(0).double()
    bb = present[~correct_n].sum(0).double()
    c, d = nc - a, nw - bb
    p = fisher_two_sided(a, bb, c, d)
    f = torch.where(p < 1 - 1e-12, torch.exp(-2 * p), torch.zeros_like(p))
    ig = information_gain(a, bb, c, d)
    x = torch.asin(torch.sqrt((a / (a + c + 1e-10)).clamp(0, 1))) - torch.asin(torch.sqrt((bb / (bb + d + 1e-10)).clamp(0, 1)))
    if tf_term:
        tok_c = correct_n[row_M]
        cnt_c = torch.bincount(inv[tok_c], minlength=U.numel()).double()
        cnt_w = torch.bincount(inv[~tok_c], minlength=U.numel()).double()
        t_c, t_w = float(tok_c.sum()), float((~tok_c).sum())
        avg = (t_c + t_w) / 2
        f_c, f_w = cnt_c / max(t_c, 1.0), cnt_w / max(t_w, 1.0)
        tf_c = f_c * (k1 + 1) / (f_c + k1 * (1 - b + b * t_c / avg))
        tf_w = f_w * (k1 + 1) / (f_w + k1 * (1 - b + b * t_w / avg))
        x = x + tf_c / (tf_w + 1e-5) - tf_w / (tf_c + 1e-5)
    score = (alpha * f + beta_ig * ig) * x / (alpha + beta_ig)
    K = 2 * top * (torch.sigmoid(score) - 0.5)
    for z in zero_token_ids:
        K[U == int(z)] = 0.0
    return U, K


@register("advantage", "ktae", needs_groups=True, provenance="CODE",
          summary="KTAE: GRPO advantage + per-token key score from Fisher/IG/Cohen's h/BM25 statistics")
def ktae(inp: AdvInput, alpha: float = 1.0, beta_ig: float = 1.0, tf_term: bool = True, top: float = 1.0,
         k1: float = 2.0, b: float = 0.5, zero_token_ids: tuple | list = (), correct_threshold: float = 0.0,
         eps: float = 1e-6) -> torch.Tensor:
    """KTAE (Sun et al., 2025, "KTAE: A Model-Free Algorithm to Key-Tokens Advantage Estimation in
    Mathematical Reasoning", arXiv 2505.16826). [CODE: xiaolizh1/KTAE
    verl/workers/actor/compute_key_tokens.py, core_algos.compute_ktae_outcome_advantage_and_keytokens]

    Per group, responses with r > correct_threshold are "correct", the rest "wrong"; if either set is
    empty every key score is 0. For each token id v present in the group, over *responses*:
    a/b = #correct/#wrong containing v, c/d = #correct/#wrong without it.
      f(v)  = exp(-2p) with p the two-sided Fisher exact p-value (0 when p = 1);
      IG(v) = information gain (log2) of correctness from "contains v";
      x(v)  = h + tf_c/(tf_w + 1e-5) - tf_w/(tf_c + 1e-5), h = asin sqrt(a/(a+c)) - asin sqrt(b/(b+d))
              (Cohen's h), tf = BM25-saturated frequency f(k1+1)/(f + k1(1 - b + b T/avgT)) with f the
              count of v over the T correct (wrong) tokens, avgT = (T_c + T_w)/2 (tf_term=False drops it);
      K(v)  = 2 top (sigmoid((alpha f + beta_ig IG) x / (alpha + beta_ig)) - 0.5), in (-top, top).
    A_{i,t} = (r_i - mean)/(std + eps) + K(o_{i,t}) on response tokens, shape [N, T].
    The official code hard-codes Qwen's EOS id 151643 to K = 0; here `zero_token_ids` lists the ids
    to zero (e.g. the tokenizer's eos id), empty by default. The paper writes the Fisher term with the
    point probability; the code uses the two-sided p-value, which is followed. Vectorised per group
    with unique/bincount instead of the code's Python loop over the vocabulary. Needs token_ids_NT
    and mask_NT.
    """
    ids = _require(inp, "token_ids_NT", "ktae", "the response token ids, [N, T]")
    mask = _require(inp, "mask_NT", "ktae", "the response mask, [N, T]") > 0
    r = inp.rewards_N.double()
    base = _grpo64(r, inp.group_N, inp.num_groups, eps=eps)
    key = torch.zeros(ids.shape, dtype=torch.float64, device=ids.device)
    for rows in group_rows(inp.group_N, inp.num_groups):
        if rows.numel() < 2:
            continue
        m = mask[rows]
        row_M = torch.arange(rows.numel(), device=m.device)[:, None].expand_as(m)[m]
        U, K = ktae_key_scores(ids[rows][m].long(), row_M, r[rows] > correct_threshold, alpha, beta_ig,
                               tf_term, top, k1, b, zero_token_ids)
        if U.numel():
            sub = torch.zeros(m.shape, dtype=torch.float64, device=m.device)
            sub[m] = K[torch.searchsorted(U, ids[rows][m].long())]
            key[rows] = sub
    return _as_rewards((base[:, None] + key) * mask, inp)


# ---- baselines from outside the group ------------------------------------------------------

@register("advantage", "pvpo", needs_groups=False, provenance="SEC",
          summary="PVPO: r - reference policy's mean reward for the prompt (static anchor), no std")
def pvpo(inp: AdvInput) -> torch.Tensor:
    """PVPO (Feng et al., 2025, "PVPO: Pre-Estimated Value-Based Policy Optimization for Agentic
    Reasoning", arXiv 2508.21104). [SEC: emergentmind summary + third-party grpo-composer
    pvpo.py, via spec selection-allocation.md section 17]
    A_i = r_i - V(x), V(x) = the reference policy's mean reward on the prompt (its pass rate for 0/1
    rewards), pre-sampled before training and refreshed every T_ref steps; no std normalisation.
    The caller must fill AdvInput.ref_pass_rate_G (one value per group, from an offline profile of the
    reference policy); the offline difficulty filter and the ground-truth trajectory injection are
    Control-side, not part of this estimator.
    """
    v = _require(inp, "ref_pass_rate_G", "pvpo",
                 "the reference policy's mean reward per group (offline pre-rollout profile)")
    if v.numel() < inp.num_groups:
        raise ValueError(f"pvpo: ref_pass_rate_G has {v.numel()} values for {inp.num_groups} groups")
    return inp.rewards_N.float() - v.float()[inp.group_N]


class BetaBaseline:
    """MSSR's per-prompt Beta(alpha, beta) success tracker [SEC+INF, spec D9], keyed by prompt id.

    The baseline of prompt x is b_x = alpha_x / (alpha_x + beta_x), read *before* the update, so an
    advantage never sees its own reward in its baseline (spec D9). After a batch, every prompt it
    visited forgets once and adds its outcomes: alpha <- lam alpha + sum r, beta <- lam beta +
    sum (1 - r), with r clipped to [0, 1].
    [INF] One forgetting step per visit, not per rollout: the spec has one rollout per prompt; with a
    group of n, forgetting per rollout would discount by lam^n within a single policy.
    [INF] `lam` is fixed (SPO ties it to the policy's KL drift, clipped to about [0.875, 0.96]).
    [INF] An unseen prompt starts at the prior Beta(prior_alpha, prior_beta), baseline 0.5 by default;
    the paper initialises from a few warm-up samples, which would cost extra rollouts.
    The learner owns one for `mssr` (see `tracks`); set its options with
    `learner.advantage_options.tracker`, e.g. {"lam": 0.9}.
    """

    def __init__(self, prior_alpha: float = 1.0, prior_beta: float = 1.0, lam: float = 0.96):
        if prior_alpha <= 0 or prior_beta <= 0 or not 0 < lam <= 1:
            raise ValueError("BetaBaseline: prior_alpha, prior_beta must be > 0 and lam in (0, 1]")
        self.prior, self.lam = (float(prior_alpha), float(prior_beta)), float(lam)
        self.ab: dict[int, tuple[float, float]] = {}  # prompt id -> (alpha, beta); absent = the prior

    def baseline(self, prompt_ids) -> torch.Tensor:
        ab = [self.ab.get(int(i), self.prior) for i in prompt_ids]
        return torch.tensor([a / (a + b) for a, b in ab], dtype=torch.float32, device="cpu")

    def update(self, prompt_ids, rewards) -> None:
        seen: dict[int, list[float]] = {}  # prompt id -> [successes, failures] in this update
        for i, r in zip(prompt_ids, torch.as_tensor(rewards, dtype=torch.float64).tolist()):
            r = min(max(r, 0.0), 1.0)
            s = seen.setdefault(int(i), [0.0, 0.0])
            s[0], s[1] = s[0] + r, s[1] + 1.0 - r
        for i, (succ, fail) in seen.items():
            a, b = self.ab.get(i, self.prior)
            self.ab[i] = (self.lam * a + succ, self.lam * b + fail)

    # the tracker protocol (see `tracks`)
    def fill(self, inp: AdvInput, batch: Batch) -> AdvInput:
        return dataclasses.replace(inp, baseline_G=self.baseline([g.prompt.id for g in batch.groups]))

    def observe(self, batch: Batch) -> None:
        self.update([g.prompt.id for g in batch.groups for _ in g.rollouts], [r.reward for r in batch.rollouts])

    def state_dict(self) -> dict:
        return {"ab": dict(self.ab)}

    def load_state_dict(self, s: dict) -> None:
        self.ab = {int(k): (float(a), float(b)) for k, (a, b) in s["ab"].items()}


@register("advantage", "mssr", needs_groups=False, provenance="SEC+INF",
          summary="MSSR: single-rollout A = r - tracked baseline, batch-normalised, + clipped entropy bonus")
@tracks(BetaBaseline)
def mssr(inp: AdvInput, kappa1: float = 0.4, kappa2: float = 2.0, normalize: bool = True,
         eps: float = 1e-6) -> torch.Tensor:
    """MSSR, single-rollout RLVR with entropy-shaped advantages (arXiv 2512.18215, CVPR 2026; title not
    recovered here). [SEC: summaries confirm a Beta-conjugate baseline plus entropy-based shaping;
    INF: formulas from SPO (arXiv 2509.13232) and Cheng et al. 2025, "Reasoning with Exploration: An
    Entropy Perspective" (arXiv 2506.14758)]

    A = r - b_x with b_x the tracked per-prompt success rate (AdvInput.baseline_G; the learner fills it
    from its BetaBaseline, read before that baseline sees this batch); then normalised over the batch
    (A - mean)/(std + eps) (skipped for a batch of one); then per token
    A_t = A + min(kappa1 * sg(H_t), |A| / kappa2), so the bonus never flips the sign of A.
    Needs baseline_G, entropy_NT and mask_NT; returns [N, T].
    """
    bl = _require(inp, "baseline_G", "mssr", "the tracked per-prompt success rate, e.g. BetaBaseline.baseline")
    ent = _require(inp, "entropy_NT", "mssr", "per-token entropies of the sampling distribution, [N, T]")
    mask = _require(inp, "mask_NT", "mssr", "the response mask, [N, T]")
    a = inp.rewards_N.float() - bl.float()[inp.group_N]
    if normalize and a.numel() > 1:
        a = (a - a.mean()) / (a.std() + eps)
    bonus = torch.minimum(kappa1 * ent.detach().float(), a.abs()[:, None] / kappa2)
    return (a[:, None] + bonus) * mask


# ---- multi-reward: GD2PO -------------------------------------------------------------------

@register("advantage", "gd2po", needs_groups=True, provenance="CODE+INF",
          summary="GD2PO: per-component GRPO advantages, mask sign-conflicted rollouts, whiten kept tokens")
def gd2po(inp: AdvInput, conflict: str = "snr", tau: float = 0.2, eps: float = 1e-6,
          tol: float = 1e-8) -> torch.Tensor:
    """GD2PO, conflict masking for multi-reward groups (arXiv 2606.16771; title not recovered here).
    [CODE: Qwen-Applications/GD2PO ray_trainer.py, via spec D10]

    1. For each of the K reward components (AdvInput.reward_parts_NK, which `batch_input` fills from
       `Rollout.reward_parts`; rewards_N is not used) compute GRPO advantages A^k inside the groups (GDPO).
    2. Hard conflict: some A^k_i > tol and some A^k'_i < -tol. conflict="snr": hard conflict and
       |sum_k A^k_i| / (sum_k |A^k_i| + eps) < tau. conflict="hard": hard conflict alone. "none": no mask.
    3. keep_i = not conflict_i; g_q = kept fraction of the group; A_i = g_q keep_i sum_k A^k_i.
    4. Whiten over the kept *tokens* only (token-weighted mean, unbiased variance, as verl's
       masked_whiten); dropped rollouts stay at 0; nothing kept gives all zeros. This is the documented
       exception to "denominators fixed before masking" (spec E2).
    Defaults: tau = 0.2 (code default; the tool-calling snr script uses 0.8); conflict="snr" [INF].
    """
    if conflict not in ("snr", "hard", "none"):
        raise ValueError(f"gd2po: conflict must be 'snr', 'hard' or 'none', not {conflict!r}")
    parts = _require(inp, "reward_parts_NK", "gd2po",
                     "the K reward components per rollout, [N, K]; use a reward function that returns "
                     "{name: value}, e.g. --set task_options.reward_parts=true").double()
    g, G = inp.group_N, inp.num_groups
    adv_NK = torch.stack([_grpo64(parts[:, k], g, G, eps=eps) for k in range(parts.shape[1])], 1)
    hard = (adv_NK > tol).any(1) & (adv_NK < -tol).any(1)
    total = adv_NK.sum(1)
    if conflict == "snr":
        bad = hard & (total.abs() / (adv_NK.abs().sum(1) + eps) < tau)
    elif conflict == "hard":
        bad = hard
    else:
        bad = torch.zeros_like(hard)
    keep = (~bad).double()
    a = group_mean(keep, g, G) * keep * total
    lens = inp.mask_NT.double().sum(1) if inp.mask_NT is not None else torch.ones_like(a)
    w = keep * lens
    n = w.sum()
    if n <= 0:
        return _as_rewards(torch.zeros_like(a), inp)
    mean = (w * a).sum() / n
    var = (w * (a - mean) ** 2).sum() / n * (n / (n - 1) if n > 1 else 0.0)
    return _as_rewards((a - mean) * torch.rsqrt(var + 1e-8) * keep, inp)
