"""Reinforce-Ada: adaptive sampling until a group has signal (Xiong, Ye, Liao, Dong, Xu, Monz, Bian, Jiang,
Zhang, "Reinforce-Ada: An Adaptive Sampling Framework for Reinforce-Style LLM Training", arXiv 2510.04996;
code RLHFlow/Reinforce-Ada, read from its copy WeiXiongUST/Reinforce-Ada, and the Tinker port
RLHFlow/Reinforce-Ada-Tinker).

A group of n rollouts that are all right or all wrong carries no GRPO signal, and most such groups are an
artefact of sampling too few. Reinforce-Ada samples each prompt in rounds, stops a prompt as soon as its
rollouts so far have the signal asked for, and trains a balanced group of the usual size n drawn from
everything the prompt generated.

Rule [CODE: verl/trainer/ppo/ray_trainer.py `_generate_multi_round_adaptive_downsampling`]::

    round 1: k rollouts for every prompt of the batch                       (allocate)
    after each round, per prompt, over all its rollouts so far:            (more)
        balanced:          exit once #correct >= n // 2 and #wrong >= n - n // 2
        positive_focused:  exit once #correct >= 1
        not exited and fewer than `rounds` rounds done: k more rollouts
    per-prompt cap: rounds x k rollouts
    every prompt trains a group of n rows (finish): the first n // 2 correct and the first n - n // 2 wrong
        rollouts in generation order; when one class is short, topped up with the other's next rows; a
        prompt with at most n rows keeps them all
    prompts that never exit still train (their group is all-right or all-wrong: a zero advantage under
        GRPO); `drop_zero_variance` leaves them out instead [INF option; off in the code]

"Correct" is the rollout's `correct` flag, the code's `reward > positive_threshold` (0.7) on its 0/1 math
reward [CODE, normalised]. For positive_focused, the code's fallback for a prompt that never exits (it takes
ceil(pos/rows x n) positives, at least one) reduces to the same n rows, since such a prompt has no correct
row. Rows are counted after each whole round, as the code does (a round's rows are all cached before the
exit check), so a prompt that exits in round r has exactly r x k rows.

Accounting: every round is a Request of the step, so the driver charges each round's rows when they come
back (as for AR3PO's and DARS's stages); `finish` returns new Group objects with the n kept rows and the
driver settles the rest as discarded (charged, never trained).

Not reproduced [deviation]: the code's `global_stat_est` advantage (GRPO's mean and std taken over every
row the prompt generated, not only the n kept) belongs to the learner. Each kept group carries the pass
rate over all its rows in `Group.meta["pool_pass_rate"]` (with `pool_n`) so an estimator can read it.

The abstract [ABS, v1-v2] names the same pieces (successive elimination, fixed-size groups with enforced
reward diversity, global-statistics baselines); v3's abstract adds an estimation-based variant (budgets
from predicted difficulty) that is not implemented here.

Defaults [CODE: scripts/run_reinforce_ada.sh, verl/trainer/config/ppo_trainer.yaml]: balanced, rounds 4,
k = round_repeat 8 for n = 4, i.e. k = 2n [INF: scaled with n; 16 for the embedded n = 8], cap 8n; n = the
planner's n (rollout.n, 4 in the script).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Sequence

from ..core import schema
from ..core.registry import register
from ..core.schema import Bool, Int, at_least, checked, one_of
from ..core.types import Group, Prompt, Request
from .base import Component, StepContext, refuse_allocators
from .capabilities import SetsN, Staged


@checked
@dataclass(frozen=True)
class ReinforceAdaOptions:
    """`planner_options.reinforce-ada`, checked by core/schema.py."""

    rule: Annotated[str, one_of("balanced", "positive_focused")] = "balanced"
    rounds: Annotated[Int, at_least(1)] = 4
    round_size: Annotated[Int | None, at_least(1, "rollouts per prompt per round; unset: 2n")] = None
    keep: Annotated[Int | None, at_least(2, "rows each prompt trains; unset: n")] = None
    drop_zero_variance: Bool = False


def exited(correct: int, wrong: int, keep: int, rule: str) -> bool:
    """The exit rule: has a prompt with `correct` right and `wrong` wrong rollouts so far enough signal?"""
    if rule == "positive_focused":
        return correct >= 1
    return correct >= keep // 2 and wrong >= keep - keep // 2


def balanced_rows(correct: Sequence[bool], keep: int) -> list[int]:
    """Indices of the rows a prompt trains, in generation order: the first keep // 2 correct and the first
    keep - keep // 2 wrong rows; when one class is short, the other's next rows fill up to keep (all rows when
    there are at most keep)."""
    right = [i for i, c in enumerate(correct) if c]
    wrong = [i for i, c in enumerate(correct) if not c]
    take = min(keep, len(correct))
    n_right = min(keep // 2, len(right))
    n_wrong = min(take - n_right, len(wrong))
    n_right += min(len(right) - n_right, take - n_right - n_wrong)  # top up from the class that has more
    return sorted(right[:n_right] + wrong[:n_wrong])


@register("planner", "reinforce-ada", provenance="CODE+INF",
          summary="Reinforce-Ada: sample each prompt in rounds until its group has signal, train a balanced n")
class ReinforceAda(Component):
    needs_sampling = True  # rounds: more samples after seeing the first ones
    declares = (SetsN(), Staged())  # the `more` hook: rounds

    def __init__(self, rule: str = "balanced", rounds: int = 4, round_size: int | None = None,
                 keep: int | None = None, drop_zero_variance: bool = False):
        self.options = schema.build(ReinforceAdaOptions, {k: v for k, v in locals().items() if k != "self"},
                                    "planner_options.reinforce-ada", prefix=True)
        self._round: dict[int, int] = {}  # this step: prompt id -> rounds generated

    def compose(self, before: list[Component], after: list[Component]) -> None:
        """Another component that sets each prompt's n would change the round size (control/base.py,
        refuse_allocators); selectors (mopps+reinforce-ada) and filters compose."""
        refuse_allocators(self, before, after)

    def round_size(self, ctx: StepContext) -> int:
        return self.options.round_size if self.options.round_size is not None else 2 * ctx.n

    def keep(self, ctx: StepContext) -> int:
        return self.options.keep if self.options.keep is not None else max(2, ctx.n)

    def begin_step(self, ctx: StepContext) -> None:
        self._round = {}

    # ---- hooks ---------------------------------------------------------------------------------
    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        for p in prompts:
            self._round[p.id] = 1
        return [self.round_size(ctx)] * len(prompts)

    def more(self, groups: list[Group], ctx: StepContext) -> list[Request]:
        k, keep, o = self.round_size(ctx), self.keep(ctx), self.options
        out = []
        for g in groups:
            pid = g.prompt.id
            done = self._round.setdefault(pid, max(1, -(-g.n // k)))
            if done < o.rounds and not exited(g.num_correct, g.n - g.num_correct, keep, o.rule):
                self._round[pid] = done + 1
                out.append(Request(g.prompt, k))
        ctx.metrics["reinforce-ada/more"] = ctx.metrics.get("reinforce-ada/more", 0.0) + sum(r.n for r in out)
        return out

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        keep, out, generated, exits = self.keep(ctx), [], 0, 0
        for g in groups:
            generated += g.n
            exits += exited(g.num_correct, g.n - g.num_correct, keep, self.options.rule)
            meta = {**g.meta, "pool_pass_rate": g.pass_rate, "pool_n": g.n}
            rows = balanced_rows([r.correct for r in g.rollouts], keep)
            out.append(Group(g.prompt, [g.rollouts[i] for i in rows], meta))
        if groups:
            ctx.metrics["reinforce-ada/mean_generated"] = generated / len(groups)
            ctx.metrics["reinforce-ada/exited"] = exits / len(groups)
        return out

    def accept(self, group: Group, ctx: StepContext) -> bool:
        return not (self.options.drop_zero_variance and group.zero_variance)

    # ---- persistence ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"round": dict(self._round)}

    def load_state_dict(self, s: dict) -> None:
        self._round = {int(k): int(v) for k, v in s["round"].items()}
