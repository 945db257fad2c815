"""Ledger: the one place where cost is counted. Every comparison reads it, never a method's claim.

Rollouts and generated tokens are counted by purpose (train, pilot, discarded, eval, profile,
oracle). The budget of a run is `budget_tokens()`: every purpose except eval and oracle
(the oracle planner's measurements are off the books by design; eval is reported apart).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from .types import PURPOSES, Rollout

OFF_BUDGET = ("eval", "oracle")


@dataclass
class Ledger:
    rollouts: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PURPOSES})
    tokens: dict[str, int] = field(default_factory=lambda: {p: 0 for p in PURPOSES})
    prompt_tokens: int = 0  # prefilled prompt tokens (all purposes)
    learner_tokens: int = 0  # tokens the learner ran forward+backward on
    seconds: dict[str, float] = field(default_factory=dict)  # wall time by phase

    def charge(self, rollouts: list[Rollout], prompt_tokens: int = 0) -> None:
        for r in rollouts:
            self._check(r.purpose)
            self.rollouts[r.purpose] += 1
            self.tokens[r.purpose] += r.num_tokens
        self.prompt_tokens += prompt_tokens

    def reclassify(self, rollouts: list[Rollout], to: str) -> None:
        """Move rollouts already charged (e.g. train) to another purpose (e.g. discarded)."""
        self._check(to)
        for r in rollouts:
            self.rollouts[r.purpose] -= 1
            self.tokens[r.purpose] -= r.num_tokens
            r.purpose = to
            self.rollouts[to] += 1
            self.tokens[to] += r.num_tokens

    @contextmanager
    def timer(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0

    def budget_tokens(self) -> int:
        return sum(v for k, v in self.tokens.items() if k not in OFF_BUDGET)

    def budget_rollouts(self) -> int:
        return sum(v for k, v in self.rollouts.items() if k not in OFF_BUDGET)

    @staticmethod
    def _check(purpose: str) -> None:
        if purpose not in PURPOSES:
            raise ValueError(f"unknown rollout purpose {purpose!r}; expected one of {PURPOSES}")

    def state_dict(self) -> dict:
        return {"rollouts": dict(self.rollouts), "tokens": dict(self.tokens),
                "prompt_tokens": self.prompt_tokens, "learner_tokens": self.learner_tokens,
                "seconds": dict(self.seconds)}

    def load_state_dict(self, s: dict) -> None:
        self.rollouts = {p: int(s["rollouts"].get(p, 0)) for p in PURPOSES}
        self.tokens = {p: int(s["tokens"].get(p, 0)) for p in PURPOSES}
        self.prompt_tokens = int(s["prompt_tokens"])
        self.learner_tokens = int(s["learner_tokens"])
        self.seconds = {k: float(v) for k, v in s["seconds"].items()}
