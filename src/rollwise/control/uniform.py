"""Plain GRPO: B prompts from the epoch-shuffled pool, n samples each, every group trains."""
from ..core.registry import register
from .base import Component


@register("planner", "uniform", provenance="CODE", summary="plain GRPO: B prompts x n samples, all groups train")
class Uniform(Component):
    """B prompts from the epoch-shuffled pool, n samples each; every group trains (the baseline)."""
