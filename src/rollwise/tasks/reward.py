"""Scoring rollouts with a reward function that may misbehave.

A user reward function (`--reward module:function`, called as fn(response, answer) -> float) runs in
a worker thread with a timeout: if it raises or hangs, that rollout gets reward 0 and the error is
counted, and the run goes on. (A hung thread cannot be killed in Python; it is abandoned and a fresh
worker takes over.) The task's own exact-match verifier is trusted and called inline.
"""
from __future__ import annotations

import importlib
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Callable

from ..core.types import Group, Rollout


def load_reward_fn(spec: str) -> Callable[[str, str], float]:
    module, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"reward {spec!r}: expected 'module:function'")
    fn = getattr(importlib.import_module(module), attr, None)
    if not callable(fn):
        raise ValueError(f"reward {spec!r}: {attr!r} is not a callable in module {module!r}")
    return fn


class Scorer:
    def __init__(self, fn: Callable[[str, str], float], trusted: bool = True, timeout_s: float = 5.0):
        self.fn, self.trusted, self.timeout_s = fn, trusted, timeout_s
        self.errors = 0  # rollouts whose reward function raised or timed out
        self._pool = None if trusted else ThreadPoolExecutor(max_workers=1)

    def reward(self, response: str, answer: str) -> float:
        if self.trusted:
            return float(self.fn(response, answer))
        fut = self._pool.submit(self.fn, response, answer)
        try:
            return float(fut.result(timeout=self.timeout_s))
        except FutureTimeout:
            self.errors += 1
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = ThreadPoolExecutor(max_workers=1)
            return 0.0
        except Exception:  # noqa: BLE001 - any failure of user code is a zero reward, not a crash
            self.errors += 1
            return 0.0

    def score(self, groups: list[Group]) -> None:
        for g in groups:
            for r in g.rollouts:
                self.score_one(r, g.prompt.answer)

    def score_one(self, r: Rollout, answer: str) -> None:
        r.reward = self.reward(r.text, answer)
        r.correct = r.reward >= 1.0
