"""Embedded task 2: a chain of additions and subtractions solved with a scratchpad.

The prompt is a chain of one-digit operands whose operations carry labels a, b, c, ..., e.g. level 2
(3 operations) "7a+3b-5c+8=". The model writes one step per operation, label first, with the running
total, then the final answer after a colon:

    prompt   7a+3b-5c+8=
    response a+3=10,b-5=5,c+8=13:13

The verifier reads only what follows the last ':' (the trace is free). A level sets the number of
operations (`OPS`: 2, 3, 4, 6, 8, 12, 16, 24), so a correct trace is about 7 tokens per operation:
about 15 tokens at level 1 and 170 at level 8.

Why this task: the Generate-side methods (partial and asynchronous rollouts, prefix reuse, mid-generation
pruning) need responses of tens to hundreds of tokens whose length grows with difficulty. Every token of
a step is a local operation: write the next label, copy the operation that follows that label in the
prompt, add a digit to the total written one step before. What makes long chains hard is doing that
many times without a slip, so accuracy falls with length. The labels make finding the next operand a
lookup by content; without them the model must count steps. In 400 supervised steps no design learned
(labelled or not; benchmarks/task2_designs.py). The shipped base needs 2400 steps and still adds
imperfectly (docs/task2.md). The running total stays in 0..99: an operation that would leave that range
is flipped.

Everything is a pure function of (seed, sizes, level weights). The held-out set is drawn first (uniform
levels); the train pool comes from another seed, disjoint from it by text. With `data_seed` set,
validation and test are carved out of that held-out set (the one the shipped base avoided), as for the
arithmetic task (_splits.py); every level has thousands of distinct chains, so none is short.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.registry import register
from ..core.types import Prompt
from ._splits import DrawnSplits
from .arithmetic import check_sizes

OPS = (2, 3, 4, 6, 8, 12, 16, 24)  # operations per level
MAX_TOTAL = 99  # the running total stays within 0..MAX_TOTAL
MARK = ":"  # the final answer follows the last MARK
LABELS = "abcdefghijklmnopqrstuvwx"  # one per operation (24)


def sample_chain(rng: np.random.Generator, ops: int) -> tuple[str, str, str]:
    """(prompt, scratchpad response, answer) of a chain with `ops` labelled operations on one-digit
    operands: "7a+3b-5=" -> "a+3=10,b-5=5:5"."""
    total = int(rng.integers(1, 10))
    prompt, steps = [str(total)], []
    for label in LABELS[:ops]:
        d = int(rng.integers(1, 10))
        op = "+" if rng.random() < 0.5 else "-"
        if (op == "-" and total - d < 0) or (op == "+" and total + d > MAX_TOTAL):
            op = "+" if op == "-" else "-"  # keep the total within 0..MAX_TOTAL
        total = total + d if op == "+" else total - d
        prompt.append(f"{label}{op}{d}")
        steps.append(f"{label}{op}{d}={total}")
    return "".join(prompt) + "=", ",".join(steps) + f"{MARK}{total}", str(total)


def final_answer(response: str) -> str | None:
    """What follows the last ':' of a response, stripped; None when there is no ':'."""
    head, mark, tail = response.rpartition(MARK)
    return tail.strip() if mark else None


@register("task", "chain", provenance="INF",
          summary="running +/- chains of 2-24 one-digit operations with a scratchpad (long responses)")
@dataclass
class ChainTask(DrawnSplits):
    """Procedural scratchpad arithmetic. `level_weights` sets the pool's difficulty mix."""

    pool_size: int = 1000
    heldout_size: int = 400
    seed: int = 0
    level_weights: tuple[float, ...] = (1,) * len(OPS)
    heldout_level_weights: tuple[float, ...] | None = None  # default: uniform over levels
    data_seed: int | None = None  # None: the one held-out set, as before splits (recorded runs rerun as made)
    validation_size: int | None = None  # with data_seed; None: half the held-out set
    test_size: int | None = None  # with data_seed; None: the other half
    split: str | None = None  # with data_seed: what heldout() returns, "validation" (default) or "test"
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    answer_marker = MARK  # the final answer follows it (DUET's abort stops a row shortly after it)
    # Defaults a run on this task needs (used when the user sets none; see run/config.py).
    max_new_tokens = 224  # a correct level-8 trace is <= 172 tokens; longer ones are cut ("length")
    # The base's recipe: a context for prompt (<= 74) + max_new_tokens, and 2400 steps of 32 examples
    # (the operand copy and the carries are still being learned at 1000; see docs/task2.md)
    warmstart_defaults = {"block_size": 320, "steps": 2400, "batch_size": 32}
    sft_group_by_length = True  # warm-start batches of similar lengths (half the padding)
    # `rollwise bench --task chain`: pool mixes (level weights) and a budget sized to ~90-token responses
    bench_mixes = {"default": (1,) * len(OPS), "easy": (4, 4, 3, 2, 1, 1, 0.5, 0.5),
                   "hard": (0.5, 0.5, 1, 1, 2, 2, 3, 3)}
    bench_defaults = {"budget_tokens": 400_000, "eval_size": 200, "pool_size": 300}

    def __post_init__(self):
        check_sizes("chain", self.pool_size, self.heldout_size)
        self.check_splits()
        self.level_weights = tuple(float(w) for w in self.level_weights)
        if len(self.level_weights) != len(OPS) or min(self.level_weights) < 0 or sum(self.level_weights) <= 0:
            raise ValueError(f"chain: level_weights must be {len(OPS)} non-negative numbers with a positive sum")

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(range(1, len(OPS) + 1))

    def _draw(self, n: int, seed: int, weights, exclude: set[str], unique: bool = True) -> list[tuple[str, str, str, int]]:
        rng = np.random.default_rng(seed)
        w = np.asarray(weights, dtype=float)
        w = w / w.sum()
        out, seen, tries = [], set(exclude), 0
        while len(out) < n:
            tries += 1
            if tries > 50 * n + 1000:
                raise ValueError(f"chain: cannot draw {n} distinct problems with level weights {weights}")
            level = int(rng.choice(self.levels, p=w))
            text, trace, ans = sample_chain(rng, OPS[level - 1])
            if text not in seen:
                if unique:
                    seen.add(text)
                out.append((text, trace, ans, level))
        return out

    def _prompts(self, n: int, seed: int, weights, exclude: set[str]) -> list[Prompt]:
        return [Prompt(i, t, a, lv) for i, (t, _, a, lv) in enumerate(self._draw(n, seed, weights, exclude))]

    def level_supply(self) -> dict[int, int]:
        """No level is small: level 1 (two operations) has ~2,900 distinct chains."""
        return {}

    def base_fingerprint(self) -> list:
        """What shapes the base: the held-out set the warm-start data avoids, and the task's format."""
        return [self.seed, self.heldout_size, self.heldout_level_weights, list(OPS), MAX_TOTAL, MARK, LABELS,
                self.sft_group_by_length]

    def sft_examples(self, n: int, seed: int) -> list[tuple[str, str, int]]:
        """(prompt, full scratchpad response, level): uniform levels, never a held-out prompt (so never a
        validation or test prompt)."""
        exclude = {p.text for p in self._universe()}
        return [(t, trace, lv) for t, trace, _, lv in self._draw(n, seed, (1,) * len(OPS), exclude, unique=False)]

    def verify(self, response: str, answer: str) -> float:
        """1 when the text after the last ':' is the answer, else 0 (the trace itself is not checked)."""
        return 1.0 if final_answer(response) == answer else 0.0
