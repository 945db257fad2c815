"""Scoring rollouts with a reward function that may misbehave.

A reward function is called as fn(response, answer) and returns either
- a float: the reward; the rollout is correct when it is >= 1; or
- a mapping {name: float} of reward components (e.g. {"correct": 1.0, "format": 1.0}). The rollout keeps
  them in `Rollout.reward_parts` (in a fixed name order) for multi-reward estimators such as GD2PO, and
  its scalar `reward` is their weighted sum, so every other part of the pipeline works unchanged.

Component weights [INF, rollwise's choice]: `Scorer(weights=...)` if given, else the weights the
function declares as a `reward_weights` attribute (for a task's bound `verify`, the task's attribute,
e.g. `task_options.reward_weights` of the arithmetic task), else the *mean* of the components. The mean
keeps the reward in [0, 1] when every component is, which binary-reward code relies on (MSSR's Beta
baseline, `reward >= 1` as "correct" for scalar rewards). Declared weights also fix the component
names up front; otherwise the first mapping returned fixes them, and a later mapping with other names
is an error.

Correctness with components: the component named `correct_part` ("correct" by default) >= 1; without
such a component, the weighted sum >= 1 (with the mean: every component at its maximum of 1).

A user reward function (`--reward module:function`) runs in a worker thread with a timeout: if it
raises, hangs or returns something that is not a number or a mapping of numbers, that rollout gets
reward 0 and all components 0 (when their names are not known yet, `score` fills the zeros once a
later rollout of the same call fixes them), the error is counted, and the run goes on. (A hung thread cannot be killed in Python; it is abandoned and a fresh worker takes over.) The
task's own verifier is trusted and called inline; its errors propagate.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Callable

from ..core.types import Group, Rollout

RewardFn = Callable[[str, str], "float | Mapping[str, float]"]


def load_reward_fn(spec: str) -> RewardFn:
    module, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"reward {spec!r}: expected 'module:function'")
    fn = getattr(importlib.import_module(module), attr, None)
    if not callable(fn):
        raise ValueError(f"reward {spec!r}: {attr!r} is not a callable in module {module!r}")
    return fn


def declared_weights(fn) -> dict[str, float] | None:
    """Component weights a reward function declares: its own `reward_weights` attribute, or that of
    the object it is bound to (a task's `verify`)."""
    for owner in (fn, getattr(fn, "__self__", None)):
        w = getattr(owner, "reward_weights", None)
        if w:
            return {str(k): float(v) for k, v in dict(w).items()}
    return None


@dataclass(frozen=True)
class Score:
    reward: float
    correct: bool
    parts: tuple[float, ...] | None = None  # components in Scorer.part_names order; None for a scalar reward


class Scorer:
    def __init__(self, fn: RewardFn, trusted: bool = True, timeout_s: float = 5.0,
                 weights: Mapping[str, float] | None = None, correct_part: str = "correct"):
        self.fn, self.trusted, self.timeout_s = fn, trusted, timeout_s
        self.weights = {str(k): float(v) for k, v in weights.items()} if weights else declared_weights(fn)
        self.part_names: tuple[str, ...] | None = tuple(self.weights) if self.weights else None
        self.correct_part = correct_part
        self.errors = 0  # rollouts whose reward function raised, timed out or returned garbage
        self._pool = None if trusted else ThreadPoolExecutor(max_workers=1)

    def judge(self, response: str, answer: str) -> Score:
        """Reward, correctness and components of one response."""
        try:
            value = self._coerce(self._call(response, answer))
        except Exception:  # noqa: BLE001 - any failure of user code is a zero reward, not a crash
            if self.trusted:
                raise
            self.errors += 1
            return Score(0.0, False, None if self.part_names is None else (0.0,) * len(self.part_names))
        return self._combine(value)

    def reward(self, response: str, answer: str) -> float:
        return self.judge(response, answer).reward

    def score(self, groups: list[Group]) -> None:
        rollouts = [r for g in groups for r in g.rollouts]
        for g in groups:
            for r in g.rollouts:
                self.score_one(r, g.prompt.answer)
        if self.part_names is not None:  # failures scored before the first mapping fixed the names
            for r in rollouts:
                if r.reward_parts is None:
                    r.reward_parts = (0.0,) * len(self.part_names)

    def score_one(self, r: Rollout, answer: str) -> None:
        s = self.judge(r.text, answer)
        r.reward, r.correct, r.reward_parts = s.reward, s.correct, s.parts

    # ---- internals --------------------------------------------------------------------------
    def _call(self, response: str, answer: str):
        if self.trusted:
            return self.fn(response, answer)
        fut = self._pool.submit(self.fn, response, answer)
        try:
            return fut.result(timeout=self.timeout_s)
        except FutureTimeout:
            self._pool.shutdown(wait=False, cancel_futures=True)  # abandon the hung worker
            self._pool = ThreadPoolExecutor(max_workers=1)
            raise

    def _coerce(self, raw) -> float | tuple[float, ...]:
        """A float, or the components as floats in part_names order (fixing the names on first use)."""
        if not isinstance(raw, Mapping):
            if self.part_names is not None:
                raise ValueError(f"reward function returned {raw!r}, expected components {self.part_names}")
            return float(raw)
        parts = {str(k): float(v) for k, v in raw.items()}
        if not parts:
            raise ValueError("reward function returned no components")
        if self.part_names is None:
            self.part_names = tuple(parts)
        elif set(parts) != set(self.part_names):
            raise ValueError(f"reward components {sorted(parts)} differ from {sorted(self.part_names)}")
        return tuple(parts[n] for n in self.part_names)

    def _combine(self, value: float | tuple[float, ...]) -> Score:
        if not isinstance(value, tuple):
            return Score(value, value >= 1.0)
        names = self.part_names
        if self.weights:
            reward = sum(self.weights[n] * p for n, p in zip(names, value))
        else:
            reward = sum(value) / len(value)
        correct = value[names.index(self.correct_part)] >= 1.0 if self.correct_part in names else reward >= 1.0
        return Score(reward, correct, value)
