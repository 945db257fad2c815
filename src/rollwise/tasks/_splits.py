"""Train / validation / test splits by a data seed, shared by the embedded tasks and file tasks [Bench 3.0].

A task that splits has the options of reasoning-gym's task (rgym.py): `data_seed`, `validation_size`,
`test_size` and `split` ("validation" or "test": what `heldout()` returns). With `data_seed` unset the
task is exactly what it was before splits existed, so every recorded run reruns identically.

The rule [rollwise's, after shared/WAVE3.md "Data splits"]: validation and test are carved out of the
task's *held-out universe* - the held-out set its shipped base was warm-started without (the embedded
tasks) or the held-out file (file tasks) - so no validation or test prompt was ever a supervised target.
The universe's distinct prompts are put in an order drawn from a hash of (data_seed, "heldout"); walking
that order, a prompt goes to validation until it has `validation_size`, then to test until it has
`test_size`. The splits are disjoint by prompt text, and the same data seed always gives the same splits.

A level with few distinct prompts (arithmetic level 1 has 155) would otherwise lose most of them to the
held-out splits. Where a level's distinct prompts are fewer than what the train pool, validation and test
ask of it, they are shared in proportion to those asks (the held-out parts rounded down, the rest left
to train), and the task's `notes()` say so. The train pool's ask is that of the task's default pool
(its size, uniform levels), so the held-out splits of a data seed are the same whatever pool a run uses.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, fields, replace

import numpy as np

SPLITS = ("validation", "test")


def stream_seed(data_seed: int, purpose: str) -> int:
    """The seed of one purpose's random stream ("heldout", "train"): hashed, so nearby data seeds give
    unrelated streams and no purpose shares a stream with another."""
    return int.from_bytes(hashlib.sha256(f"rollwise-split:{data_seed}:{purpose}".encode()).digest()[:8], "big") >> 1


def check_options(task: str, data_seed, split, validation_size, test_size) -> None:
    """One-line errors for split options that cannot work together."""
    if data_seed is None:
        set_ = [n for n, v in (("split", split), ("validation_size", validation_size), ("test_size", test_size))
                if v is not None]
        if set_:
            raise ValueError(f"{task}: task_options.{set_[0]} needs task_options.data_seed (the splits are drawn "
                             "by a data seed; without one the task has its one held-out set)")
        return
    if isinstance(data_seed, bool) or not isinstance(data_seed, int) or data_seed < 0:
        raise ValueError(f"{task}: task_options.data_seed must be an integer >= 0, got {data_seed!r}")
    if split is not None and split not in SPLITS:
        raise ValueError(f"{task}: task_options.split must be one of {', '.join(SPLITS)}, got {split!r}")
    for name, v in (("validation_size", validation_size), ("test_size", test_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{task}: task_options.{name} must be an integer >= 1, got {v!r}")


@dataclass(frozen=True)
class Carved:
    validation: list[int]  # indices into the universe, in the drawn order
    test: list[int]
    notes: list[str]


def carve(texts: list[str], levels: list[int], data_seed: int, validation_size: int, test_size: int,
          train_asks: dict[int, float] | None = None, supply: dict[int, int] | None = None,
          what: str = "held-out set") -> Carved:
    """Validation and test out of a universe of prompts (`texts`, each with its level; duplicates by text
    count once). `supply` gives the number of distinct prompts of a level that has few ({level: count}, the
    levels not named have plenty); `train_asks` what the train pool asks of each level (its size times the
    level's weight). A level whose supply is below what the three splits ask of it has its held-out share
    capped in proportion."""
    first = {}
    for i, t in enumerate(texts):
        first.setdefault(t, i)
    distinct = sorted(first.values())
    order = [distinct[j] for j in np.random.default_rng(stream_seed(data_seed, "heldout")).permutation(len(distinct))]
    n = len(order)
    notes = []
    if validation_size + test_size > n:  # a small universe: share it between the two held-out splits
        v = n * validation_size // (validation_size + test_size)
        notes.append(f"the {what} has {n} distinct prompts, fewer than validation_size + test_size = "
                     f"{validation_size + test_size}: split in proportion, {v} validation and {n - v} test")
        validation_size, test_size = v, n - v
    per_level = Counter(levels[i] for i in order)
    caps: dict[int, tuple[int, int]] = {}
    for lv, count in sorted((supply or {}).items()):
        if lv not in per_level:
            continue
        ask_v, ask_t = validation_size * per_level[lv] / n, test_size * per_level[lv] / n  # its expected share
        ask = (train_asks or {}).get(lv, 0.0) + ask_v + ask_t
        if count < ask:
            caps[lv] = (int(count * ask_v / ask), int(count * ask_t / ask))
            notes.append(f"level {lv} has {count} distinct prompts, fewer than the ~{ask:.0f} the train pool, "
                         f"validation and test ask of it: split in proportion, at most {caps[lv][0]} validation and "
                         f"{caps[lv][1]} test, the rest train")
    # Walk the order; each prompt goes to the split with room (under its level's cap) that is least full,
    # so when capped levels leave the universe short, both splits are short in proportion.
    out: dict[str, list[int]] = {"validation": [], "test": []}
    size = {"validation": validation_size, "test": test_size}
    taken = Counter()
    for i in order:
        lv = levels[i]
        cap = dict(zip(SPLITS, caps.get(lv, (n, n))))
        room = [s for s in SPLITS if len(out[s]) < size[s] and taken[lv, s] < cap[s]]
        if room:
            s = min(room, key=lambda s: len(out[s]) / size[s])  # ties: validation
            out[s].append(i)
            taken[lv, s] += 1
    val, test = out["validation"], out["test"]
    for name, got, want in (("validation", val, validation_size), ("test", test, test_size)):
        if len(got) < want:
            notes.append(f"the {name} split has {len(got)} prompts, fewer than the {want} asked")
    return Carved(val, test, notes)


def split_sizes(universe: int, validation_size: int | None, test_size: int | None) -> tuple[int, int]:
    """The sizes asked, with the defaults: half the universe each (validation rounded down)."""
    v = universe // 2 if validation_size is None else validation_size
    t = universe - universe // 2 if test_size is None else test_size
    return v, t


class DrawnSplits:
    """`heldout()`, `train_pool()`, `split_prompts()` and `notes()` of a task that draws its prompts by
    level from seeded streams (arithmetic, chain). The task has the fields seed, pool_size, heldout_size,
    level_weights, heldout_level_weights, data_seed, validation_size, test_size, split and _cache, a
    `levels` tuple, `_prompts(n, seed, weights, exclude)` (distinct prompts, none in `exclude`) and
    `level_supply()` ({level: distinct prompts} for its small levels).

    Without a data seed: the held-out universe (drawn first, from seed*2+2, uniform levels by default) is
    `heldout()`, and the train pool is drawn from seed*2+1 outside it, as before splits existed. With one:
    validation and test are carved from that universe (carve), and the train pool is drawn from the data
    seed's own stream outside them (so the universe's unused prompts may be trained on; none was a
    warm-start target, which is all the rule needs)."""

    def check_splits(self) -> None:
        check_options(type(self).__name__, self.data_seed, self.split, self.validation_size, self.test_size)

    def _universe(self) -> list:
        """The held-out set the warm start avoids (its base's `base_fingerprint` names what shapes it)."""
        if "heldout" not in self._cache:
            weights = self.heldout_level_weights or (1,) * len(self.levels)
            self._cache["heldout"] = self._prompts(self.heldout_size, self.seed * 2 + 2, weights, set())
        return self._cache["heldout"]

    def _carved(self) -> Carved:
        if "carved" not in self._cache:
            uni = self._universe()
            v, t = split_sizes(len(uni), self.validation_size, self.test_size)
            # what the task's default train pool (uniform levels) asks of each level: the held-out splits
            # then do not move with a run's pool size or mix, so every bench on a data seed tests alike
            pool = next(f.default for f in fields(self) if f.name == "pool_size")
            asks = {lv: pool / len(self.levels) for lv in self.levels}
            self._cache["carved"] = carve([p.text for p in uni], [p.level for p in uni], self.data_seed, v, t,
                                          asks, self.level_supply(), "held-out set the base avoids")
        return self._cache["carved"]

    def split_prompts(self, split: str) -> list:
        """The prompts of one split: "train", "validation" or "test" (needs a data seed)."""
        if self.data_seed is None:
            raise ValueError(f"{type(self).__name__}: splits need task_options.data_seed")
        if split not in self._cache:
            uni = self._universe()
            if split == "train":
                c = self._carved()
                exclude = {uni[i].text for i in c.validation + c.test}
                self._cache[split] = self._prompts(self.pool_size, stream_seed(self.data_seed, "train"),
                                                   self.level_weights, exclude)
            elif split in SPLITS:
                self._cache[split] = [replace(uni[i], id=j) for j, i in enumerate(getattr(self._carved(), split))]
            else:
                raise ValueError(f"no split {split!r}: train, validation or test")
        return self._cache[split]

    def heldout(self) -> list:
        """The held-out universe without a data seed; with one, the split `split` names (validation)."""
        return self._universe() if self.data_seed is None else self.split_prompts(self.split or "validation")

    def train_pool(self) -> list:
        if self.data_seed is not None:
            return self.split_prompts("train")
        if "train" not in self._cache:
            exclude = {p.text for p in self._universe()}
            self._cache["train"] = self._prompts(self.pool_size, self.seed * 2 + 1, self.level_weights, exclude)
        return self._cache["train"]

    def notes(self) -> list[str]:
        """What the splits could not give as asked (a level with few distinct prompts)."""
        return [] if self.data_seed is None else list(self._carved().notes)
