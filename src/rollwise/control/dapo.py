"""DAPO dynamic sampling (Yu et al., 2025, "DAPO: An Open-Source LLM Reinforcement Learning System
at Scale", arXiv 2503.14476).

Rule [CODE: volcengine/verl recipe/dapo/dapo_ray_trainer.py]: roll out, keep groups whose reward std
is > 0 (or n == 1), draw fresh prompts and roll out again while fewer than B groups are kept, for at
most `max_rounds` generation rounds; train on the first B kept groups, discard the surplus.
Deviation [INF]: verl raises when max_rounds is reached short of B; rollwise trains on what it has
(a step with fewer groups), because killing a long run over one hard batch helps nobody.
Default [INF, scaled to the embedded default]: max_rounds = 5 (verl's script uses 10 with 3B prompts
per round; the embedded pool is small, so rounds draw B - kept prompts each).
"""
from ..core.registry import register
from ..core.types import Group
from .base import Component, StepContext


@register("planner", "dapo", provenance="CODE+INF", summary="DAPO dynamic sampling: drop zero-variance groups, refill, bounded rounds")
class DAPO(Component):
    refill = True

    def __init__(self, max_rounds: int = 5):
        if max_rounds < 1:
            raise ValueError("dapo: max_rounds must be >= 1")
        self.max_rounds = max_rounds

    def accept(self, group: Group, ctx: StepContext) -> bool:
        return group.n == 1 or not group.zero_variance
