"""Off-policy corrections (`--correction`), registered by name.

Behaviour log-probs mu come from the engine (what actually sampled the tokens); pi_old is recomputed
by the learner before the update; pi_theta is the policy being trained.
Contract: `fn(ci: CorrectionInput, **options) -> (weight_NT, keep_NT)`: detached per-token weights
that multiply the per-token loss, and a 0/1 mask of tokens kept in the loss. Identity: (1, 1).
"""
from __future__ import annotations

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
