"""The Bench 3.0 testbed task: a remainder by repeated subtraction, with a scratchpad (long responses).

The prompt is a number a and a digit d; the model subtracts d again and again, writing each result,
until the number is below d, then writes that remainder after a colon. Numbers are written with their
digits reversed, as in the `arithmetic` task (units first, so a borrow runs left to right):

    prompt   74-6=            (47, subtract 6)
    response 14,53,92,32,71,11,5:5   (41, 35, 29, 23, 17, 11, 5)

Why this task (docs/testbed.md has the search that chose it): Bench 3.0 asks for a testbed with long
responses (p50 >= 50 tokens, p99/p50 >= 3) on which GRPO's held-out accuracy rises by +0.15 within
5 core-minutes. In `chain` (task 2) every step must find its operand by label in the prompt, which the
tiny model learns slowly (2400 warm-start steps and it still slips), so RL has little it can fix in a
few minutes. Here every step is local: the operand is at a fixed place in the prompt and the number to
subtract from was written just before, so a short warm start learns the rule and leaves slips, which
compound over a long trace: a row of q steps is right with probability about (1 - slip)^q. Length grows
with difficulty (the number of steps q), and the answer is checked, not the trace.

Levels set the number of subtractions q (`QUOTIENTS`); d is uniform in 2..9 and the remainder in
0..d-1, so a = q*d + r <= 9*54+8 = 494. A step writes 1-3 digits and a comma, so a level-1 trace is
about 10 tokens and a level-6 one about 150-200.

Splits from one data seed [rollwise's rule, as `reasoning-gym`'s; Bench 3.0 item 2]: the held-out
stream (seeded by a hash of the data seed and "heldout") gives the first `validation_size` distinct
prompts to validation and the next `test_size` to test; the train stream gives the first `pool_size`
distinct prompts that are not held-out prompts; the warm-start stream draws examples (with repeats)
that are never held-out prompts. So no validation or test prompt is ever a warm-start or RL target.
`heldout()` (what evaluations read) is the validation split, or the test split with `split="test"`.
Level 1 has only 132 distinct prompts (q in 3..5, 44 pairs (d, r) each): the held-out stream takes
its share first, and the pool gets what is left (notes() counts it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..core.registry import register
from ..core.types import Prompt
from ._splits import stream_seed

QUOTIENTS = ((3, 5), (6, 9), (10, 15), (16, 24), (25, 36), (37, 54))  # subtractions per level (inclusive)
MARK = ":"  # the final answer follows the last MARK
SPLITS = ("validation", "test")
CHECKS = ("trace", "answer")


def rev(x: int) -> str:
    """A number with its digits reversed (units first): 47 -> "74", 100 -> "001"."""
    return str(x)[::-1]


def sample_problem(rng: np.random.Generator, level: int) -> tuple[str, str, str]:
    """(prompt, scratchpad response, answer) of one problem at `level`."""
    lo, hi = QUOTIENTS[level - 1]
    q = int(rng.integers(lo, hi + 1))
    d = int(rng.integers(2, 10))
    r = int(rng.integers(0, d))
    return render(q * d + r, d)


def render(a: int, d: int, slip: float = 0.0, rng: np.random.Generator | None = None) -> tuple[str, str, str]:
    """(prompt, response, answer) for a and d: "74-6=" -> "14,53,...,5:5". With `slip` > 0 (a noisy
    teacher, for warm-start data only) each result is wrong with that probability, off by one in the units
    or by ten in the tens, and the trace goes on correctly from the wrong number."""
    trace, x = [], a
    while x >= d:
        x -= d
        if slip and rng.random() < slip:
            x = max(0, x + int(rng.choice((-1, 1))) * (1 if rng.random() < 0.5 else 10))
        trace.append(rev(x))
    return f"{rev(a)}-{d}=", ",".join(trace) + f"{MARK}{x}", str(x)


def final_answer(response: str) -> str | None:
    """What follows the last ':' of a response, stripped; None when there is no ':'."""
    head, mark, tail = response.rpartition(MARK)
    return tail.strip() if mark else None


@register("task", "remainder", provenance="INF",
          summary="remainder by repeated subtraction with a scratchpad (Bench 3.0 testbed; long responses)")
@dataclass
class RemainderTask:
    """The testbed task. `level_weights` sets the pool's difficulty mix; splits by `data_seed`."""

    data_seed: int = 0
    pool_size: int = 1000
    validation_size: int = 200
    test_size: int = 200
    split: str = "validation"  # the held-out set heldout() returns: "validation" or "test"
    sft_slip: float = 0.02  # warm-start traces slip at this rate per step (a noisy teacher; 0: exact traces)
    check: str = "trace"  # what the reward checks: the whole worked trace ("trace") or the final answer only
    level_weights: tuple[float, ...] = (1,) * len(QUOTIENTS)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    answer_marker = MARK  # the final answer follows it (DUET's abort stops a row shortly after it)
    max_new_tokens = 224  # the longest correct trace (q = 54, three-digit numbers) is < 200 tokens
    # the best base of the testbed search so far (docs/testbed.md): the noisy teacher (sft_slip 0.02) at
    # 1500 steps of 32, about 8 CPU-minutes, built once and cached when no base is shipped
    warmstart_defaults = {"block_size": 256, "batch_size": 32, "steps": 1500}
    sft_group_by_length = True  # warm-start batches of similar lengths (less padding)
    # `rollwise bench --task remainder`: the budget of the testbed search's runs (24 steps of 32 x 8, ~3.6
    # core-minutes with evaluations); the pool is Bench 2.0's 300 (prompts come back, as history needs)
    bench_defaults = {"budget_tokens": 500_000, "eval_size": 200}

    def __post_init__(self):
        if self.check not in CHECKS:
            raise ValueError(f"task_options.check must be one of {', '.join(CHECKS)}, got {self.check!r}")
        if self.split not in SPLITS:
            raise ValueError(f"task_options.split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        self.level_weights = tuple(float(w) for w in self.level_weights)
        if len(self.level_weights) != len(QUOTIENTS) or min(self.level_weights) < 0 or sum(self.level_weights) <= 0:
            raise ValueError(f"task_options.level_weights must be {len(QUOTIENTS)} non-negative numbers with a "
                             f"positive sum, got {self.level_weights}")
        if not 0.0 <= self.sft_slip < 0.5:
            raise ValueError(f"task_options.sft_slip must be in [0, 0.5), got {self.sft_slip}")
        for name in ("pool_size", "validation_size", "test_size"):
            n = getattr(self, name)
            if not 1 <= n <= 5000:
                raise ValueError(f"task_options.{name} must be in 1..5000, got {n}")

    @property
    def levels(self) -> tuple[int, ...]:
        return tuple(range(1, len(QUOTIENTS) + 1))

    def _stream(self, purpose: str, n: int, weights, exclude: set[str], unique: bool) -> list[tuple[str, str, str, int]]:
        rng = np.random.default_rng(stream_seed(self.data_seed, purpose))
        w = np.asarray(weights, dtype=float) / float(sum(weights))
        out, seen = [], set(exclude)
        for _ in range(60 * n + 2000):  # each level has >= 132 distinct prompts; a full level is skipped
            if len(out) == n:
                break
            level = int(rng.choice(self.levels, p=w))
            text, trace, ans = sample_problem(rng, level)
            if text in seen:
                continue
            if unique:
                seen.add(text)
            out.append((text, trace, ans, level))
        return out

    def _heldout_rows(self) -> dict[str, list]:
        if "heldout_rows" not in self._cache:
            n = self.validation_size + self.test_size
            rows = self._stream("heldout", n, (1,) * len(QUOTIENTS), set(), unique=True)
            if len(rows) < n:
                raise ValueError(f"remainder: only {len(rows)} distinct held-out prompts, asked for {n}")
            self._cache["heldout_rows"] = {"validation": rows[:self.validation_size],
                                           "test": rows[self.validation_size:]}
        return self._cache["heldout_rows"]

    def split_prompts(self, split: str) -> list[Prompt]:
        """The prompts of one split: "train", "validation" or "test"."""
        if split not in self._cache:
            if split == "train":
                exclude = {r[0] for rows in self._heldout_rows().values() for r in rows}
                rows = self._stream("train", self.pool_size, self.level_weights, exclude, unique=True)
            else:
                rows = self._heldout_rows()[split]
            # the reference is the whole response when the trace is checked, else the final answer
            self._cache[split] = [Prompt(i, t, trace if self.check == "trace" else a, lv)
                                  for i, (t, trace, a, lv) in enumerate(rows)]
        return self._cache[split]

    def heldout(self) -> list[Prompt]:
        return self.split_prompts(self.split)

    def train_pool(self) -> list[Prompt]:
        return self.split_prompts("train")

    def notes(self) -> list[str]:
        pool = self.train_pool()
        if len(pool) < self.pool_size:
            return [f"remainder: the pool has {len(pool)} distinct prompts (asked {self.pool_size}): the "
                    f"held-out splits took their share first"]
        return []

    def base_fingerprint(self) -> list:
        """What shapes the base: the data seed (its held-out sets are never warm-start targets), the
        held-out sizes and the format."""
        return [self.data_seed, self.validation_size, self.test_size, [list(q) for q in QUOTIENTS], MARK,
                self.sft_group_by_length, self.sft_slip]  # `check` is not here: the warm start's examples do not depend on it

    def sft_examples(self, n: int, seed: int) -> list[tuple[str, str, int]]:
        """(prompt, full scratchpad response, level): uniform levels, never a held-out prompt."""
        exclude = {r[0] for rows in self._heldout_rows().values() for r in rows}
        rows = self._stream(f"sft:{seed}", n, (1,) * len(QUOTIENTS), exclude, unique=False)
        if not self.sft_slip:
            return [(t, trace, lv) for t, trace, _, lv in rows]
        rng = np.random.default_rng(stream_seed(self.data_seed, f"slip:{seed}"))
        return [(t, render(int(t.split("-")[0][::-1]), int(t.split("-")[1][:-1]), self.sft_slip, rng)[1], lv)
                for t, _, _, lv in rows]

    def verify(self, response: str, answer: str) -> float:
        """check="trace": 1 when the response is the worked trace and its answer exactly (a slip scores 0
        even when the remainder comes out right, which a guessed digit below d does about one time in
        four, 1/d on average); check="answer": 1 when the text after the last ':' is the remainder."""
        if self.check == "trace":
            return 1.0 if response.strip() == answer else 0.0
        return 1.0 if final_answer(response) == answer else 0.0
