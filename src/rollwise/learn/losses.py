"""Policy losses (`--loss`) and loss aggregations (`--loss-agg`), registered by name.

Loss contract: `fn(lp: LossInput, **options) -> (loss_NT, stats)` where loss_NT is the per-token loss
(to be aggregated) and stats holds detached per-token diagnostics, e.g. `clipped_NT` (bool).
Aggregation contract: `fn(loss_NT, mask_NT, totals: AggTotals, **options) -> scalar`. `totals` holds
the token and sequence counts of the whole *minibatch*, so that summing the aggregate over
micro-batches gives exactly the minibatch value (micro-batching changes nothing but memory).
"""
from __future__ import annotations

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


@register("loss", "ppo-clip", provenance="CODE",
          summary="PPO clipped surrogate with asymmetric clip (clip-higher: clip_high > clip_low)")
def ppo_clip(lp: LossInput, clip_low: float = 0.2, clip_high: float = 0.28):
    """PPO-clip (Schulman et al., 2017) with DAPO's decoupled clip-higher bounds (arXiv 2503.14476).
    [CODE: verl core_algos compute_policy_loss] L = -min(r A, clip(r, 1-eps_low, 1+eps_high) A)."""
    ratio = torch.exp(lp.logp_NT - lp.old_logp_NT)
    unclipped = -lp.adv_NT * ratio
    clipped = -lp.adv_NT * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    if lp.weight_NT is not None:
        loss = loss * lp.weight_NT
    return loss, {"clipped_NT": (clipped > unclipped).detach(), "ratio_NT": ratio.detach()}


@register("aggregation", "token-mean", provenance="CODE",
          summary="sum of per-token losses / tokens in the minibatch")
def token_mean(loss_NT, mask_NT, totals: AggTotals):
    """Every token of the minibatch weighs the same (DAPO). [CODE: verl agg_loss token-mean]"""
    return (loss_NT * mask_NT).sum() / max(totals.tokens, 1)
