"""Partial rollouts: groups whose rows did not all finish in their step are carried to the next one.

APRIL ("Active Partial Rollouts in Reinforcement Learning to Tame Long-tail Generation", RLsys-Foundation,
code RLsys-Foundation/APRIL, a slime fork) and CoPRIS (Concurrency-controlled Partial Rollout with
Importance Sampling, code 777pomingzi/CoPRIS, a verl fork) both stop generation when the batch has
enough finished groups and keep what the unfinished rows generated for the next step.

Rule [CODE: slime/rollout/sglang_example.py, slime/ray/buffer.py; CoPRIS agent_loop.py]::

    submit groups until in flight >= over-provisioned count; the carried buffer goes first, then fresh
    prompts
    when `batch_size` groups are complete: abort the rest; every group with any generated row goes back
    to the buffer, its completed rows included (status carried)
    next step: each unfinished row continues from prompt + its tokens, max tokens minus what it has
    (a row with no budget left is a length stop)

rollwise's additions, both [INF]:
  * a row is also stopped at a per-step token budget (`segment_tokens`, the "partial rollout" of verl's
    agent loop: long rows then take several steps instead of stalling one);
  * the staleness bound is checked again when a row is resumed (the run's StalenessPolicy,
    core/staleness.py: async mode always, the synchronous loop when `max_staleness` is set): a row whose
    oldest token would be more than S versions old is dropped with its group (its tokens charged as
    aborted) and the prompt is asked for again from scratch.
The learner sees each token's own behaviour log-prob (the rows keep them across segments): with
`learner.recompute_old=false` the PPO ratio is taken against them, CoPRIS's cross-stage importance
sampling; with the default (recomputed old log-probs, APRIL's choice) a correction such as tis-token or
areal-decoupled reweights them.

The component only declares `Partial(overprovision, segment_tokens)`; the Planner runs what that
capability means (control/partial.py: the carried groups and the first wave of each step).
"""
from __future__ import annotations

import math

from ..core.registry import register
from .base import Component
from .capabilities import Partial


@register("planner", "april", provenance="CODE+INF",
          summary="APRIL/CoPRIS partial rollouts: over-provision, stop at the batch, carry unfinished rows")
class April(Component):
    """Partial rollouts. `overprovision`: prompts asked for beyond the batch (1.0 = APRIL's 2x: 64 for a
    batch of 32), the rest aborted once `batch_size` groups are complete; `segment_tokens`: a per-step
    budget of new tokens per row (None: none). Composes with selectors and filters (`greso+april`,
    `april+dapo`); not with staged allocation, whose later stages would need rows that are still out."""

    def __init__(self, overprovision: float = 1.0, segment_tokens: int | None = None):
        if not (math.isfinite(overprovision) and overprovision >= 0):  # inf would ask for infinitely many prompts
            raise ValueError(f"april: overprovision must be a finite number >= 0, got {overprovision}")
        if segment_tokens is not None and segment_tokens < 1:
            raise ValueError(f"april: segment_tokens must be >= 1 (or None), got {segment_tokens}")
        if overprovision == 0 and segment_tokens is None:
            raise ValueError("april: set overprovision > 0 or a segment_tokens budget (else it does nothing)")
        self.overprovision, self.segment_tokens = float(overprovision), segment_tokens
        self.declares = (Partial(self.overprovision, segment_tokens),)
