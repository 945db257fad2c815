"""PromptHistory: the one store of what happened to each prompt.

Columnar numpy arrays, one row per prompt of the pool, plus an append-only visit log.
`record` touches only the rows of the groups it is given, so a step costs O(batch) whatever
the pool size (a pool of millions of prompts is a few tens of MB).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from .types import Group

# Per-prompt summary columns (what most planners read) and their dtypes.
_COLUMNS = {
    "visits": np.int32,  # how many steps the prompt was rolled out in
    "last_step": np.int32,  # -1 = never visited
    "last_n": np.int32,
    "last_correct": np.int32,
    "total_n": np.int64,
    "total_correct": np.int64,
    "easy_streak": np.int32,  # consecutive most-recent visits that were all correct
    "hard_streak": np.int32,  # consecutive most-recent visits that were all wrong
    "last_mean_len": np.float32,
    "last_entropy": np.float32,
}
# One row per visit, appended in step order.
_LOG = {"step": np.int32, "prompt": np.int64, "n": np.int32, "correct": np.int32,
        "mean_len": np.float32, "mean_entropy": np.float32}


@dataclass
class GroupStats:
    """Groups as columns, read in one pass (Group.counts): what the history records and the simulator
    reports of a step's groups, computed once per step (the driver's StepOutcome.visits)."""

    prompt: np.ndarray  # int64 prompt ids
    n: np.ndarray  # int64
    correct: np.ndarray  # int64
    tokens: np.ndarray  # int64
    mean_entropy: np.ndarray  # float64
    zero_variance: np.ndarray  # bool

    @classmethod
    def of(cls, groups: Iterable[Group], drop_empty: bool = True) -> "GroupStats":
        groups = groups if type(groups) is list else list(groups)
        # one counts() call per group and one array per column: the simulator reads ~10^6 groups a second
        n, c, tok, ent, zv = zip(*[g.counts() for g in groups]) if groups else [()] * 5
        cols = (np.fromiter([g.prompt.id for g in groups], np.int64, count=len(groups)), np.array(n, np.int64),
                np.array(c, np.int64), np.array(tok, np.int64), np.array(ent, np.float64), np.array(zv, bool))
        if drop_empty and 0 in n:  # a group with no rollouts (all pruned, or trimmed away) is no visit
            keep = cols[1] > 0
            cols = tuple(col[keep] for col in cols)
        return cls(*cols)

    def __len__(self) -> int:
        return len(self.prompt)


class PromptHistory:
    def __init__(self, num_prompts: int):
        self.num_prompts = int(num_prompts)
        for name, dt in _COLUMNS.items():
            setattr(self, name, np.zeros(self.num_prompts, dtype=dt))
        self.last_step[:] = -1
        self._log = {k: np.zeros(1024, dtype=dt) for k, dt in _LOG.items()}
        self._log_len = 0

    # ---- writing -------------------------------------------------------------------------
    def record(self, groups: Iterable[Group] | GroupStats, step: int) -> None:
        v = groups if isinstance(groups, GroupStats) else GroupStats.of(groups)
        if not len(v):
            return
        self.record_arrays(step, prompt=v.prompt, n=v.n, correct=v.correct, mean_len=v.tokens / v.n,
                           mean_entropy=v.mean_entropy)

    def record_arrays(self, step: int, prompt, n, correct, mean_len=None, mean_entropy=None) -> None:
        """Vectorised record (the simulator calls this directly). One visit per prompt id."""
        prompt = np.asarray(prompt, dtype=np.int64)
        n = np.asarray(n, dtype=np.int32)
        correct = np.asarray(correct, dtype=np.int32)
        k = len(prompt)
        mean_len = np.zeros(k, np.float32) if mean_len is None else np.asarray(mean_len, np.float32)
        mean_entropy = np.zeros(k, np.float32) if mean_entropy is None else np.asarray(mean_entropy, np.float32)
        all_right, all_wrong = correct == n, correct == 0
        self.visits[prompt] += 1
        self.last_step[prompt] = step
        self.last_n[prompt] = n
        self.last_correct[prompt] = correct
        self.total_n[prompt] += n
        self.total_correct[prompt] += correct
        self.easy_streak[prompt] = np.where(all_right, self.easy_streak[prompt] + 1, 0)
        self.hard_streak[prompt] = np.where(all_wrong, self.hard_streak[prompt] + 1, 0)
        self.last_mean_len[prompt] = mean_len
        self.last_entropy[prompt] = mean_entropy
        self._append_log(step, prompt, n, correct, mean_len, mean_entropy)

    def _append_log(self, step, prompt, n, correct, mean_len, mean_entropy) -> None:
        k = len(prompt)
        need = self._log_len + k
        cap = len(self._log["step"])
        if need > cap:
            new_cap = max(need, 2 * cap)
            for key, arr in self._log.items():
                grown = np.zeros(new_cap, dtype=arr.dtype)
                grown[: self._log_len] = arr[: self._log_len]
                self._log[key] = grown
        sl = slice(self._log_len, need)
        self._log["step"][sl] = step
        self._log["prompt"][sl] = prompt
        self._log["n"][sl] = n
        self._log["correct"][sl] = correct
        self._log["mean_len"][sl] = mean_len
        self._log["mean_entropy"][sl] = mean_entropy
        self._log_len = need

    # ---- reading -------------------------------------------------------------------------
    def last_pass_rate(self, ids) -> np.ndarray:
        """Pass rate at the last visit; NaN for never-visited prompts."""
        ids = np.asarray(ids, dtype=np.int64)
        n = self.last_n[ids]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, self.last_correct[ids] / np.maximum(n, 1), np.nan)

    def last_zero_variance(self, ids) -> np.ndarray:
        """Whether each prompt's last visit was zero-variance (all right or all wrong); False if never visited."""
        ids = np.asarray(ids, dtype=np.int64)
        n, c = self.last_n[ids], self.last_correct[ids]
        return (n > 0) & ((c == 0) | (c == n))

    def zero_variance_persistence(self, groups: Iterable[Group] | GroupStats) -> dict[str, int]:
        """Call before recording `groups`: of those whose prompt's last visit was zero-variance, how many
        are zero-variance again. The persistence history-based skipping (GRESO) bets on, and one of the
        simulator's calibration targets."""
        v = groups if isinstance(groups, GroupStats) else GroupStats.of(groups)
        was_zv = self.last_zero_variance(v.prompt)
        return {"zv_revisits": int(was_zv.sum()), "zv_revisits_stayed": int((was_zv & v.zero_variance).sum())}

    def log(self) -> dict[str, np.ndarray]:
        """The visit log, one row per (step, prompt) visit."""
        return {k: v[: self._log_len] for k, v in self._log.items()}

    # ---- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        out = {f"col.{k}": getattr(self, k) for k in _COLUMNS}
        out.update({f"log.{k}": v for k, v in self.log().items()})
        return out

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        n = len(state["col.visits"])
        if n != self.num_prompts:
            raise ValueError(f"PromptHistory: checkpoint has {n} prompts, the pool has {self.num_prompts}")
        for k in _COLUMNS:
            setattr(self, k, np.array(state[f"col.{k}"], dtype=_COLUMNS[k]))
        self._log_len = len(state["log.step"])
        self._log = {k: np.array(state[f"log.{k}"], dtype=dt) for k, dt in _LOG.items()}
        if self._log_len == 0:
            self._log = {k: np.zeros(1024, dtype=dt) for k, dt in _LOG.items()}

    def save(self, path: str | Path) -> None:
        np.savez(path, **self.state_dict())

    @classmethod
    def load(cls, path: str | Path) -> "PromptHistory":
        with np.load(path) as z:
            state = {k: z[k] for k in z.files}
        h = cls(len(state["col.visits"]))
        h.load_state_dict(state)
        return h
