"""Tail batching: race the prompts of a step, train on the groups that finish first, and run the ones that
would stall the step together later, in a long round of their own.

RollPacker ("Mitigating Long-Tail Rollouts for Fast, Synchronous RL Post-Training", Gao et al. 2025,
arXiv 2509.21009, NSDI '26; code Farrrrland/RollPacker). A synchronous step waits for its longest response;
a few long ones keep the rest of the batch idle. RollPacker's rule [PAPER]::

    short round: launch eta x P0 prompts; keep the first P0 groups to complete; abort the rest and put their
                 prompts in a long-prompt queue
    long round:  once the queue holds P0 prompts, run them alone, without racing, to full length

Every trained token comes from the current policy (nothing is resumed across steps, unlike APRIL), so the
method stays synchronous; what it changes is *which* prompts train *when*: long-response prompts are trained
later and together. That is a bias to measure, not a speed to assume: the metrics rows carry what it deferred
(`tail_deferred`, their difficulty level `tail_deferred_level` beside the kept ones' `tail_kept_level`,
their tokens at the abort) and which steps were long rounds (`tail_long_round`; those rows' `len_mean` and
`len_p90` are the deferred prompts' full lengths). Aborted tokens are charged as aborted.

[INF] rollwise races prompts only; each keeps its own n rows (RollPacker also samples more responses per
prompt and keeps the first that finish, which biases a group towards its short responses). The component
only declares `TailBatched(overprovision)`; the Planner runs it (control/partial.py `tail_wave`).
"""
from __future__ import annotations

import math

from ..core.registry import register
from .base import Component
from .capabilities import TailBatched


@register("planner", "tail", provenance="PAPER+INF",
          summary="RollPacker's tail batching: race over-provisioned prompts, defer the slow ones to long rounds")
class TailBatch(Component):
    """Tail batching. `overprovision`: prompts launched beyond the batch in a short round (0.25: 40 for a
    batch of 32); the groups not finished once `batch_size` are complete wait for a long round. [INF] the
    default: RollPacker tunes eta per model; a quarter more keeps the wasted decode small on a short tail."""

    def __init__(self, overprovision: float = 0.25):
        if not (math.isfinite(overprovision) and overprovision > 0):
            raise ValueError(f"tail: overprovision must be a finite number > 0 (prompts raced beyond the batch), "
                             f"got {overprovision}")
        self.overprovision = float(overprovision)
        self.declares = (TailBatched(self.overprovision),)
