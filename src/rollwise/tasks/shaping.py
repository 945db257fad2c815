"""Reward shaping: a term added to a rollout's scored reward that depends on the rollout itself (its
length), not on the answer. Registered under the kind `shaping`; a run picks one with
`reward_shaping: NAME` and `reward_shaping_options: {...}`, and `ShapedScorer` applies it after the task's
verifier has scored each rollout. Correctness is never changed: evaluation and "solved" stay the
verifier's; only the training reward moves.

`overlong` is DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), as verl's DAPO reward manager
computes it (`verl/workers/reward_manager/dapo.py`, config `reward_model.overlong_buffer.{len,
penalty_factor}`, `max_resp_len` = the run's response limit):

    expected = L_max - L_cache
    shaping  = min(-(L - expected) / L_cache * penalty_factor, 0)

i.e. 0 up to L_max - L_cache tokens, then falling linearly to -penalty_factor at L_max. L counts every
response token the engine generated, EOS included (verl's `valid_response_length`). The paper's formula
also gives -1 beyond L_max; verl never sees such lengths (generation stops at L_max), rollwise clips
there too, so a partial rollout resumed past the limit gets no more than -penalty_factor.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.registry import register


@register("shaping", "overlong", provenance="CODE",
          summary="DAPO soft overlong punishment: linear penalty in the last L_cache tokens before L_max")
@dataclass
class OverlongPenalty:
    """max_len: L_max (default: the run's max_new_tokens); buffer_len: L_cache (default: max_len // 5,
    DAPO's 4096 of 20480); penalty_factor: the penalty at L_max (1.0 in DAPO)."""

    max_len: int | None = None
    buffer_len: int | None = None
    penalty_factor: float = 1.0

    def __post_init__(self):
        if self.max_len is not None:
            self.bind(self.max_len)

    def bind(self, max_len: int) -> "OverlongPenalty":
        """Set L_max (the run's response limit when the user gave none) and check the buffer."""
        self.max_len = int(self.max_len if self.max_len is not None else max_len)
        if self.buffer_len is None:
            self.buffer_len = max(1, self.max_len // 5)
        if not 0 < self.buffer_len <= self.max_len:
            raise ValueError(f"overlong: need 0 < buffer_len <= max_len, got buffer_len={self.buffer_len}, "
                             f"max_len={self.max_len}")
        if self.penalty_factor < 0:
            raise ValueError(f"overlong: penalty_factor must be >= 0, got {self.penalty_factor}")
        return self

    def __call__(self, rollout) -> float:
        expected = self.max_len - self.buffer_len
        exceed = rollout.num_tokens - expected
        return max(min(-exceed / self.buffer_len * self.penalty_factor, 0.0), -self.penalty_factor)


def build_shaping(name: str, options: dict, max_len: int):
    """The registered shaping `name` built with `options`, its length limit defaulting to `max_len`."""
    from ..core import registry

    shape = registry.get("shaping", name).obj(**options)
    return shape.bind(max_len) if hasattr(shape, "bind") else shape


class ShapedScorer:
    """A Scorer whose scored rewards get `shape(rollout)` added (correctness untouched). Everything else
    (judge, errors) is the wrapped scorer's: evaluation judges answers, not lengths."""

    def __init__(self, scorer, shape):
        self.scorer, self.shape = scorer, shape

    def score(self, groups) -> None:
        self.scorer.score(groups)
        for g in groups:
            for r in g.rollouts:
                r.reward += self.shape(r)

    def judge(self, response: str, answer: str):
        return self.scorer.judge(response, answer)

    # Everything else (errors, scored, last_error, judge_many, close) is the wrapped scorer's, read and
    # written through, so a resume that restores the counters restores them where they are counted.
    def __getattr__(self, name):
        if name in ("scorer", "shape"):
            raise AttributeError(name)
        return getattr(self.scorer, name)

    def __setattr__(self, name, value):
        if name in ("scorer", "shape"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.scorer, name, value)
