"""reasoning-gym's task families by name: `--task reasoning-gym --set task_options.dataset=gcd`.

reasoning-gym (`pip install 'rollwise[reasoning-gym]'`) generates its problems locally from a seed;
nothing is downloaded. (This module is not
named reasoning_gym.py: the reward worker puts this directory on its import path, where that name would
shadow the package.) Any of its families is named by `dataset`; `dataset_options` pass through to its
config (e.g. {"min_value": 1, "max_value": 100} for gcd), except `seed` and `size`, which this task sets.

Splits from one data seed [rollwise's rule, after Bench 3.0's]: each purpose reads its own stream of the
generator, seeded with a hash of (data_seed, purpose), item 0, 1, 2, ... in order, keeping the first
item of each distinct prompt text:
- held-out stream: the first `validation_size` distinct prompts are the validation split, the next
  `test_size` the test split;
- train stream: the first `pool_size` distinct prompts that are not held-out prompts;
- warm-start stream: the first `sft_size` distinct prompts that are not held-out prompts (they may be
  train prompts, as the embedded tasks' warm-start data may; `sft_disjoint=true` keeps them out of the
  train pool too: on a family with few distinct prompts the warm start otherwise memorises the pool, and
  the run warns when it finds the pool mostly solved at its first step).
So the three splits are disjoint by prompt text, the held-out sets do not depend on the pool size, and no
validation or test prompt is ever a warm-start target. `heldout()` (what `rollwise eval` and a run's
evaluations read) is the validation split, or the test split with `split="test"`. A family with fewer
distinct prompts than asked (each stream reads at most 4x what it needs + 100 items) has them split in
proportion to pool_size : validation_size : test_size (held-out parts rounded down, the rest train), and
`notes()` says so.

Reward: the family's own `score_answer`, on the response (stripped) or, with `answer_tag="answer"`, on the
text of its last <answer>...</answer>. It runs in a reward worker process with a timeout and a memory
limit (`verify_timeout_s`, `verify_memory_mb`), not inline: about twenty families' verifiers parse the
response with sympy, which evaluates Python (see `_rg_reward.py`). A worker failure scores 0. Scores may
be partial (in [0, 1]); a rollout is correct at 1.

The worker's sandbox (`verify_sandbox`, default "auto"): once it has imported the verifier, the worker
enters new network, mount and PID namespaces, sees a read-only file system but for a private /tmp, drops
to an unprivileged user and can start no process (`_reward_worker.py`; the threat model is docs/tasks.md).
"auto" sandboxes it where the trainer may (Linux, root, the user `nobody`), else warns once and runs it
as today; true requires it (a one-line error where it cannot be had); false never sandboxes it. Not
refused without it, as code tasks are: the verifier is the family's own code, and what a response can
make it run is a sympy expression, not a program.

A prompt's reference `answer` is the JSON that verifier needs (dataset, options and the generated entry),
so checkpoints, resumed rows and a user's `--reward` see it whole; the plain reference answer is in it
under "entry"/"answer".

Warm start for the tiny model: a supervised pass on the warm-start stream's (question, answer) rows, as
for the embedded tasks (a family whose entries have no reference answer, e.g. boxnet, cannot be
warm-started: it needs --model). The tiny tokenizer gets printable ASCII and every character of those rows.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import math
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.registry import register
from ..core.types import Prompt
from .reward import RewardError, RewardWorker
from .sandbox import unavailable, worker_settings

WORKER_DIR = str(Path(__file__).parent)  # where the worker imports _rg_reward from, as a top-level module

SPLITS = ("validation", "test")
RESERVED = ("seed", "size")  # dataset options this task sets


def _rg():
    try:
        import reasoning_gym
    except ImportError:
        raise ValueError("task reasoning-gym needs the reasoning-gym package: "
                         "pip install 'rollwise[reasoning-gym]'") from None
    return reasoning_gym


def stream_seed(data_seed: int, purpose: str) -> int:
    """The generator seed of one purpose's stream. reasoning-gym seeds item i with seed + i, so nearby
    seeds would share items; hashed seeds are far apart."""
    return int.from_bytes(hashlib.sha256(f"rollwise-rg:{data_seed}:{purpose}".encode()).digest()[:4], "big") >> 1


@register("task", "reasoning-gym", provenance="INF",
          summary="any reasoning-gym family by name (local generators), its own verifier as the reward")
@dataclass
class ReasoningGymTask:
    dataset: str = ""
    dataset_options: dict = field(default_factory=dict)
    data_seed: int = 0
    pool_size: int = 2000
    validation_size: int = 200
    test_size: int = 200
    split: str = "validation"  # the held-out set heldout() returns: "validation" or "test"
    sft_size: int = 2000  # distinct warm-start rows (examples are drawn from them with repeats)
    sft_disjoint: bool = False  # warm-start rows never train-pool prompts (a small family: lower pool_size too)
    answer_tag: str | None = None  # e.g. "answer": score the text of the response's last <answer>...</answer>
    verify_timeout_s: float = 10.0
    verify_memory_mb: int = 4096
    verify_sandbox: bool | str = "auto"  # the worker's sandbox: "auto" (where the trainer may), true, false

    # the tiny model's prompts are the family's question text (gcd's are ~110 characters)
    sft_apart = "task_options.sft_disjoint=true (warm-start rows outside the train pool; on a family this small, " \
                "with a lower pool_size to leave it rows)"  # the run's memorised-pool warning offers it
    warmstart_defaults = {"block_size": 256}

    def __post_init__(self):
        rg = _rg()
        from reasoning_gym.factory import DATASETS

        if not self.dataset:
            raise ValueError("task reasoning-gym: set task_options.dataset (e.g. gcd)")
        if self.dataset not in DATASETS:
            close = difflib.get_close_matches(self.dataset, sorted(DATASETS), n=5, cutoff=0.5)
            hint = f"close matches: {', '.join(close)}" if close else f"{len(DATASETS)} families, e.g. " + \
                ", ".join(sorted(DATASETS)[:8])
            raise ValueError(f"task_options.dataset: reasoning-gym has no dataset {self.dataset!r}; {hint}")
        if self.split not in SPLITS:
            raise ValueError(f"task_options.split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.verify_sandbox not in (True, False, "auto"):
            raise ValueError(f"task_options.verify_sandbox must be true, false or auto, got {self.verify_sandbox!r}")
        if self.verify_sandbox is True and (why := unavailable()):
            raise ValueError(f"task_options.verify_sandbox=true: {why} (set it to auto or false to run the "
                             "verifier without it)")
        bad = [k for k in RESERVED if k in self.dataset_options]
        if bad:
            raise ValueError(f"task_options.dataset_options: {', '.join(bad)} is set by the task "
                             "(use task_options.data_seed and the split sizes)")
        for name in ("pool_size", "validation_size", "test_size", "sft_size"):
            if getattr(self, name) < (1 if name == "pool_size" else 0):
                raise ValueError(f"task_options.{name} must be >= {1 if name == 'pool_size' else 0}")
        try:
            rg.create_dataset(self.dataset, **self.dataset_options, seed=0, size=1)
        except Exception as e:  # noqa: BLE001 - its config's own checks (TypeError, AssertionError, ValueError)
            raise ValueError(f"task_options.dataset_options for {self.dataset!r}: {type(e).__name__}: {e}") from None
        self._notes: list[str] = []
        self._cache: dict = {}
        self._worker: RewardWorker | None = None

    # ---- the splits --------------------------------------------------------------------------------
    def _stream(self, purpose: str, n: int, exclude: set[str]) -> list[dict]:
        """The first n entries of a purpose's stream with distinct prompt texts outside `exclude`."""
        cap = 4 * n + 100
        ds = _rg().create_dataset(self.dataset, **self.dataset_options,
                                  seed=stream_seed(self.data_seed, purpose), size=cap)
        out, seen = [], set(exclude)
        for i in range(cap):
            if len(out) >= n:
                break
            entry = ds[i]
            if entry["question"] not in seen:
                seen.add(entry["question"])
                out.append(entry)
        if len(out) < n:
            self._notes.append(f"{self.dataset}: {purpose}: {len(out)} distinct prompts in {cap} generated, "
                               f"fewer than the {n} asked")
        return out

    def _prompts(self, entries: list[dict]) -> list[Prompt]:
        return [Prompt(i, e["question"], self._answer(e)) for i, e in enumerate(entries)]

    def _answer(self, entry: dict) -> str:
        from . import _rg_reward  # imports reasoning_gym: only once the package is known to be there

        ref = {"dataset": self.dataset, "entry": _rg_reward.encode({"answer": entry["answer"],
                                                                    "metadata": entry["metadata"]})}
        if self.dataset_options:
            ref["options"] = self.dataset_options
        if self.answer_tag:
            ref["tag"] = self.answer_tag
        return json.dumps(ref, sort_keys=True, default=str)

    def _heldout_entries(self) -> dict[str, list[dict]]:
        if "heldout" not in self._cache:
            want = self.validation_size + self.test_size
            rows = self._stream("heldout", want, set())
            n_val, n_test = self.validation_size, self.test_size
            if len(rows) < want:  # the family has about len(rows) distinct prompts: share them out
                total = self.pool_size + want
                n_val, n_test = len(rows) * n_val // total, len(rows) * n_test // total
                self._notes.append(f"{self.dataset}: about {len(rows)} distinct prompts, split in proportion "
                                   f"to pool_size:validation_size:test_size: {n_val} validation, {n_test} test, "
                                   "the rest train")
            self._cache["heldout"] = {"validation": rows[:n_val], "test": rows[n_val:n_val + n_test]}
        return self._cache["heldout"]

    def _heldout_texts(self) -> set[str]:
        return {e["question"] for rows in self._heldout_entries().values() for e in rows}

    def split_prompts(self, split: str) -> list[Prompt]:
        """The prompts of one split: "train", "validation" or "test"."""
        if split not in self._cache:
            if split == "train":
                rows = self._stream("train", self.pool_size, self._heldout_texts())
                if not rows:
                    raise ValueError(f"task reasoning-gym: {self.dataset}: no train prompt is left outside "
                                     "the held-out sets; lower validation_size/test_size")
            else:
                rows = self._heldout_entries()[split]
            self._cache[split] = self._prompts(rows)
        return self._cache[split]

    def train_pool(self) -> list[Prompt]:
        return self.split_prompts("train")

    def heldout(self) -> list[Prompt]:
        return self.split_prompts(self.split)

    def notes(self) -> list[str]:
        """What the splits could not give as asked (a family with few distinct prompts)."""
        return list(self._notes)

    # ---- the reward ----------------------------------------------------------------------------------
    def verify(self, response: str, answer: str) -> float:
        """The family's score_answer, in the worker; 0 when it fails (raises, times out, crashes)."""
        if self._worker is None:
            self._worker = self._start_worker(answer)
        (ok, value), = self._worker.call([(response, answer)])
        try:
            if not ok:
                raise RewardError(value)
            score = float(value)
        except (RewardError, TypeError, ValueError):
            return 0.0
        return score if math.isfinite(score) else 0.0

    def _start_worker(self, answer: str) -> RewardWorker:
        """The reward worker, sandboxed as `verify_sandbox` asks. It warms up on the reference answer of
        the first prompt scored (every prompt of the task has the same family and options)."""
        from . import _rg_reward

        args = ("_rg_reward:score", self.verify_timeout_s, self.verify_memory_mb, [WORKER_DIR])
        if self.verify_sandbox is False:
            return RewardWorker(*args, own=True)
        why = unavailable()
        if why is None:
            try:
                return RewardWorker(*args, own=True, sandbox=worker_settings(),
                                    warm=[(_rg_reward.reference_response(answer), answer)])
            except ValueError as e:
                why = str(e)
        if self.verify_sandbox is True:
            raise ValueError(f"task_options.verify_sandbox=true: {why}")
        print(f"warning: reasoning-gym: the verifier runs without its sandbox ({why}); "
              "task_options.verify_sandbox=false silences this, true makes it an error", file=sys.stderr)
        return RewardWorker(*args, own=True)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    # ---- the supervised warm start (policy/warmstart.py) --------------------------------------------
    def _target(self, entry: dict) -> str:
        ans = str(entry["answer"])
        return f"<{self.answer_tag}>{ans}</{self.answer_tag}>" if self.answer_tag else ans

    def sft_distinct(self) -> list[tuple[str, str, int]]:
        """The distinct warm-start rows (question, target, -1); never a held-out prompt."""
        if "sft" not in self._cache:
            exclude = self._heldout_texts()
            if self.sft_disjoint:
                exclude |= {p.text for p in self.train_pool()}
            rows = [e for e in self._stream("sft", self.sft_size, exclude) if e["answer"] is not None]
            if not rows and self.sft_disjoint:
                raise ValueError(f"task reasoning-gym: {self.dataset}: sft_disjoint leaves no warm-start row outside "
                                 f"the held-out sets and the train pool ({len(self.train_pool())} prompts); lower "
                                 "task_options.pool_size")
            if not rows:
                raise ValueError(f"task reasoning-gym: {self.dataset}'s entries have no reference answer to "
                                 "warm-start on; train a model of your own (--model PATH)")
            self._cache["sft"] = [(e["question"], self._target(e), -1) for e in rows]
        return self._cache["sft"]

    def sft_examples(self, n: int, seed: int) -> list[tuple[str, str, int]]:
        rows = self.sft_distinct()
        return [rows[i] for i in np.random.default_rng(seed).integers(len(rows), size=n)]

    def sft_notes(self) -> list[str]:
        self.sft_distinct()
        return self.notes()

    def alphabet(self) -> str:
        rows = self.sft_distinct() + [(e["question"], self._target(e), -1) for rows in
                                      self._heldout_entries().values() for e in rows if e["answer"] is not None]
        return "".join(sorted(set(string.printable) | {c for q, t, _ in rows for c in q + t}))

    def base_fingerprint(self) -> list:
        from importlib.metadata import version

        key = ["reasoning-gym-v1", version("reasoning-gym"), self.dataset, self.dataset_options, self.data_seed,
               self.validation_size, self.test_size, self.sft_size, self.answer_tag]
        # only when set, so the bases built before the option keep their keys; the pool then shapes the base
        return key + [{"sft_disjoint": True, "pool_size": self.pool_size}] if self.sft_disjoint else key
