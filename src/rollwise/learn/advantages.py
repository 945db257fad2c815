"""Advantage estimators, registered by name (`--advantage`).

Contract: `fn(inp: AdvInput, **options) -> Tensor` of shape [N] (one value per rollout, broadcast
over its tokens) or [N, T] (token-level, e.g. KTAE). Groups may have any size, including 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.registry import register


@dataclass
class AdvInput:
    rewards_N: torch.Tensor  # float rewards, one per rollout
    group_N: torch.Tensor  # long group index in [0, G); rollouts of one prompt share it
    mask_NT: torch.Tensor | None = None  # 1 on response tokens (for token-level estimators)
    token_ids_NT: torch.Tensor | None = None
    entropy_NT: torch.Tensor | None = None  # per-token entropy of the sampling distribution
    ref_pass_rate_G: torch.Tensor | None = None  # a reference policy's pass rate per group (PVPO)
    reward_parts_NK: torch.Tensor | None = None  # several reward components per rollout (GD2PO)

    @property
    def num_groups(self) -> int:
        return int(self.group_N.max().item()) + 1 if self.group_N.numel() else 0


def group_mean(x_N: torch.Tensor, group_N: torch.Tensor, G: int) -> torch.Tensor:
    """Per-rollout mean of x over its group."""
    s = torch.zeros(G, dtype=x_N.dtype).index_add_(0, group_N, x_N)
    c = torch.zeros(G, dtype=x_N.dtype).index_add_(0, group_N, torch.ones_like(x_N))
    return (s / c.clamp(min=1))[group_N]


def group_std(x_N: torch.Tensor, group_N: torch.Tensor, G: int) -> torch.Tensor:
    """Per-rollout unbiased std of x over its group (0 for groups of one)."""
    mean = group_mean(x_N, group_N, G)
    sq = torch.zeros(G, dtype=x_N.dtype).index_add_(0, group_N, (x_N - mean) ** 2)
    c = torch.zeros(G, dtype=x_N.dtype).index_add_(0, group_N, torch.ones_like(x_N))
    return (sq / (c - 1).clamp(min=1)).sqrt()[group_N]


@register("advantage", "grpo", provenance="CODE",
          summary="GRPO: (r - group mean) / (group std + eps); scale_std=False drops the std")
def grpo(inp: AdvInput, scale_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """GRPO (Shao et al., 2024, DeepSeekMath, arXiv 2402.03300). [CODE: verl core_algos
    compute_grpo_outcome_advantage] A_i = (r_i - mean_g) / (std_g + eps), std unbiased."""
    r, g, G = inp.rewards_N.float(), inp.group_N, inp.num_groups
    adv = r - group_mean(r, g, G)
    if scale_std:
        adv = adv / (group_std(r, g, G) + eps)
    return adv
