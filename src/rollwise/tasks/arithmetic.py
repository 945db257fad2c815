"""The embedded procedural task: integer addition and subtraction with a difficulty knob (1-6 digits).

Numbers are written with their digits reversed, each in a fixed-width slot of 6 digits, and the
answer is the reversed result: e.g. level 3, 123 + 45 -> prompt "321000+540000=" answer "861".
Reversed digits let a tiny model carry left-to-right like a person does right-to-left; with the usual
order a 1M-parameter model barely learns addition in minutes (trial notes in issue 2).

The level is the digit count of the first operand; the second has 1..level digits. The held-out set
is drawn first (uniform levels by default); the train pool is drawn from another seed, excluding it. Everything is a pure function
of (seed, sizes, level weights): two machines build the same task.

Splits: with `data_seed` set, validation and test (`validation_size`, `test_size`: half the held-out set
each by default) are carved out of that held-out set - the one the shipped base was warm-started
without - and `split` picks what `heldout()` returns; the train pool is drawn from the data seed's own
stream (see _splits.py). Level 1 has only 155 distinct problems: it is shared between the splits in
proportion to what each asks of it, and `notes()` says so.

The reward is exact match (1/0). `reward_parts=true` makes it two components, correctness and format
(see `answer_format`), for multi-reward estimators (`--advantage gd2po`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.registry import register
from ..core.types import Prompt
from ._splits import DrawnSplits

WIDTH = 6
LEVELS = tuple(range(1, WIDTH + 1))
PARTS = ("correct", "format")  # reward components with reward_parts=True


def encode_problem(a: int, b: int, op: str, answer_width: int = 0) -> tuple[str, str]:
    def slot(x: int) -> str:
        return str(x)[::-1].ljust(WIDTH, "0")

    result = a + b if op == "+" else a - b
    return f"{slot(a)}{op}{slot(b)}=", str(result)[::-1].ljust(answer_width, "0")


def decode_operand(slot: str) -> int:
    return int(slot[::-1])


def sample_problem(rng: np.random.Generator, level: int, ops: str = "+-", answer_width: int = 0) -> tuple[str, str]:
    a = int(rng.integers(10 ** (level - 1) if level > 1 else 0, 10 ** level))
    b_digits = int(rng.integers(1, level + 1))
    b = int(rng.integers(10 ** (b_digits - 1) if b_digits > 1 else 0, 10 ** b_digits))
    op = ops[int(rng.integers(len(ops)))]
    if op == "-" and b > a:
        a, b = b, a
    return encode_problem(a, b, op, answer_width)


MAX_PROMPTS = 100_000  # per split of a generated task: drawing one takes ~0.1-0.2 ms, so 1e8 took hours


def check_sizes(task: str, pool_size: int, heldout_size: int) -> None:
    """A generated task draws its prompts one by one when first asked: a size past MAX_PROMPTS is refused
    at once rather than drawn for hours."""
    for name, n in (("pool_size", pool_size), ("heldout_size", heldout_size)):
        if n > MAX_PROMPTS:
            raise ValueError(f"task_options.{name} must be at most {MAX_PROMPTS:,} for {task} (its prompts are drawn "
                             f"one by one), got {n:,}")


@register("task", "arithmetic", provenance="INF", summary="reversed-digit +/- with 1-6 digit levels (embedded default)")
@dataclass
class ArithmeticTask(DrawnSplits):
    """Procedural arithmetic. `level_weights` sets the pool's difficulty mix (the bench's waste knob)."""

    pool_size: int = 2000
    heldout_size: int = 1000
    seed: int = 0
    level_weights: tuple[float, ...] = (1, 1, 1, 1, 1, 1)
    ops: str = "+-"
    answer_width: int = 0  # pad the reversed answer with zeros to this width (0 = no padding)
    heldout_level_weights: tuple[float, ...] | None = None  # default: uniform over levels
    reward_parts: bool = False  # verify returns {"correct", "format"} components, not a float (GD2PO)
    reward_weights: dict | None = None  # the components' weights in the scalar reward (None: their mean)
    data_seed: int | None = None  # None: the one held-out set, as before splits (recorded runs rerun as made)
    validation_size: int | None = None  # with data_seed; None: half the held-out set
    test_size: int | None = None  # with data_seed; None: the other half
    split: str | None = None  # with data_seed: what heldout() returns, "validation" (default) or "test"
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    answer_marker = None  # a response is the answer alone: no marker (DUET's abort applies its length gate only)
    levels = LEVELS

    def __post_init__(self):
        check_sizes("arithmetic", self.pool_size, self.heldout_size)
        self.check_splits()
        self.level_weights = tuple(float(w) for w in self.level_weights)
        if not self.ops or set(self.ops) - {"+", "-"}:
            raise ValueError(f"arithmetic: ops must be a non-empty mix of '+' and '-', got {self.ops!r}")
        if len(self.level_weights) != len(LEVELS) or min(self.level_weights) < 0 or sum(self.level_weights) <= 0:
            raise ValueError(f"arithmetic: level_weights must be {len(LEVELS)} non-negative numbers with a positive sum")
        if self.reward_weights is not None:
            if not self.reward_parts:
                raise ValueError("arithmetic: reward_weights needs reward_parts=true")
            if set(self.reward_weights) != set(PARTS):
                raise ValueError(f"arithmetic: reward_weights must weigh exactly {list(PARTS)}, "
                                 f"got {sorted(self.reward_weights)}")

    def _draw(self, n: int, seed: int, weights, exclude: set[str], unique: bool = True) -> list[tuple[str, str, int]]:
        rng = np.random.default_rng(seed)
        w = np.asarray(weights, dtype=float)
        w = w / w.sum()
        out, seen = [], set(exclude)
        tries = 0
        while len(out) < n:
            tries += 1
            if tries > 50 * n + 1000:
                raise ValueError(f"arithmetic: cannot draw {n} distinct problems with level weights {weights}")
            level = int(rng.choice(LEVELS, p=w))
            text, ans = sample_problem(rng, level, self.ops, self.answer_width)
            if text not in seen:
                if unique:
                    seen.add(text)
                out.append((text, ans, level))
        return out

    def _prompts(self, n: int, seed: int, weights, exclude: set[str]) -> list[Prompt]:
        return [Prompt(i, t, a, lv) for i, (t, a, lv) in enumerate(self._draw(n, seed, weights, exclude))]

    def level_supply(self) -> dict[int, int]:
        """{level: distinct problems} for the levels small enough to enumerate (level 1: 155 with both ops;
        level 2 has ~13,500); the others have far more than any split asks."""
        out = {}
        for lv in LEVELS:
            a_range = range(10 ** (lv - 1) if lv > 1 else 0, 10 ** lv)
            if len(a_range) * 10 ** lv * len(self.ops) > 20_000:
                break
            out[lv] = len({encode_problem(*((b, a) if op == "-" and b > a else (a, b)), op)[0]
                           for a in a_range for b in range(10 ** lv) for op in self.ops})
        return out

    def base_fingerprint(self) -> list:
        """What of this task shapes its warm-started base (the held-out set it avoids and how answers
        are written); the train pool's size and mix do not, so benches on other pools share the base."""
        return [self.seed, self.heldout_size, self.heldout_level_weights, self.ops, self.answer_width]

    def sft_examples(self, n: int, seed: int) -> list[tuple[str, str, int]]:
        """Supervised examples for the warm start: uniform levels, repeats allowed (there are only 155
        distinct level-1 problems), never a held-out problem (so never a validation or test prompt)."""
        exclude = {p.text for p in self._universe()}
        return self._draw(n, seed, (1,) * len(LEVELS), exclude, unique=False)

    def verify(self, response: str, answer: str) -> float | dict[str, float]:
        """Exact match (1/0); with reward_parts, the components {"correct": exact match, "format":
        answer_format}. The Scorer weighs them into the scalar reward (reward_weights, else their
        mean) and takes correctness from "correct"."""
        correct = 1.0 if response.strip() == answer else 0.0
        if not self.reward_parts:
            return correct
        return {"correct": correct, "format": answer_format(response, answer)}


def answer_format(response: str, answer: str) -> float:
    """1 when the response is well formed whatever its value: only ASCII digits, exactly as many as the
    reference answer has (the reversed result, padded to answer_width). [INF] A format reward in the
    spirit of GD2PO's tool-calling format/length rewards: a wrong answer of the right shape earns it, a
    right one always does, so it conflicts with correctness on well-formed wrong answers."""
    s = response.strip()
    return 1.0 if s.isascii() and s.isdigit() and len(s) == len(answer) else 0.0
