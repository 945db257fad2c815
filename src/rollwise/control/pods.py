"""PODS: Policy Optimization with Down-Sampling ("Not All Rollouts are Useful: Down-Sampling Rollouts in
LLM Reinforcement Learning", Xu, Savani, Fang, Kolter; CMU; arXiv 2504.13818). Read from the abstract
[ABS] (v1-v4); no official code was found in the stored sources, so nothing here is [CODE]. The closed
form of the max-variance subset is the one the issue states; tests/test_control_pods.py checks it
against a brute-force search over every subset.

Generation is cheap and parallel, the update is memory- and communication-bound: roll out many
samples per prompt, update on an informative subset of each group only.

Rule::

    generate n rollouts per prompt (the n the planner allocated, or `n`)      [ABS]
    keep the size-m subset of each group with the largest reward variance    [ABS: max-variance
        (a closed form: sort the rewards; the best subset is the k lowest      down-sampling, an
        and the m - k highest for some k; scan the k)                          O(n log n) solution]
    groups of at most m rows train whole                                      [INF]
    the GRPO advantage is computed over the kept subset (the learner sees     [ABS: "training only on a
        only the new group)                                                    selected subset"; INF]

The down-sampling is `max_variance_subset` (control/pilot_commit.py, shared with Pilot-Commit's
pilot trimming and AERO): for 0/1 rewards it keeps m // 2 correct and m - m // 2 wrong rows (topped up
from the other class when one is short), which is the same extreme subset; equal rewards are drawn at
random from the planner's stream (ctx.rng), so a run is reproducible by seed.

Accounting: `finish` returns new Group objects holding the kept rows; the driver settles the rows left
out as "discarded" (charged once when generated, never trained). Under a compute budget that charges
the learner per trained token, the learner cost falls from n to m rows per group; that is where PODS
can save. The decode budget is unchanged (every rollout is generated).

Defaults [INF; the paper's (n, m) pairs were not read]: n = the planner's n (the embedded default 8),
m = n // 2 (at least 2) when not given, so a default PODS group trains half the rows GRPO trains
(WAVE3: report rows per trained group; compare with GRPO at the nearest n).
Composes with selectors before it (greso+pods), with allocation (knapsack+pods: each group of n_i is
trimmed to m) and after anything that grows a group in `finish` (speed-rl+pods: the screening rows are
candidates too; put pods last). `compose` refuses `pods+speed-rl` (it would trim before the screening rows
are added) and, when PODS is given its own `n`, every other component that sets each prompt's n.
"""
from __future__ import annotations

from ..core.registry import register
from ..core.types import Group, Prompt
from .base import Component, StepContext, refuse_allocators
from .capabilities import HoldsBack, SetsN
from .pilot_commit import max_variance_subset


@register("planner", "pods", provenance="ABS+INF",
          summary="PODS: generate n per prompt, train each group's max-reward-variance subset of m rows")
class PODS(Component):
    def __init__(self, m: int | None = None, n: int | None = None):
        if m is not None and m < 2:
            raise ValueError(f"pods: m must be >= 2 (a group of one row has no variance), not {m}")
        if n is not None and (n < 1 or (m is not None and n < m)):
            raise ValueError(f"pods: need n >= m >= 2, not n={n}, m={m}")
        self.m, self.n = m, n
        # with its own n it sets each prompt's n; without, it passes the n it is given on
        self.declares = (SetsN(),) if n is not None else (HoldsBack(),)

    def compose(self, before: list, after: list) -> None:
        """With its own `n`, PODS sets each prompt's n: another component that does too is refused by name
        (control/base.py, refuse_allocators). speed-rl after PODS is refused: it adds its screening rows in
        `finish`, after PODS has trimmed."""
        if self.n is not None:
            refuse_allocators(self, before, after)
        for o in after:
            if o.name == "speed-rl":
                raise ValueError("pods does not compose with speed-rl after it: pods would trim each group before "
                                 "speed-rl adds its screening rows (finish); put pods last (speed-rl+pods)")

    def keep(self, ctx: StepContext) -> int:
        return self.m if self.m is not None else max(2, ctx.n // 2)

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        return ns if self.n is None else [self.n] * len(prompts)

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        m, out, dropped = self.keep(ctx), [], 0
        for g in groups:
            if g.n <= m:
                out.append(g)
                continue
            idx = max_variance_subset(g.rewards, m, ctx.rng)
            out.append(Group(g.prompt, [g.rollouts[i] for i in idx], dict(g.meta)))
            dropped += g.n - m
        ctx.metrics["pods/dropped"] = ctx.metrics.get("pods/dropped", 0.0) + dropped
        return out
