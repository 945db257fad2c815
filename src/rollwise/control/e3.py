"""E3-RL: "Enhancing Efficiency and Exploration in Reinforcement Learning for LLMs" (Liao et al.,
EMNLP 2025, arXiv 2505.18573; code LiaoMengqi/E3-RL4LLMs).

Fewer rollouts for easy prompts, more for hard ones, by each prompt's accuracy rank from the
previous epoch; and an adaptive sampling temperature that holds the policy entropy at a target.

Rule [CODE: e3/trainer/ray_trainer.py L391-430 (get_rollout_n_per_prompt) and L1205-1450,
e3/data/rl_dataset.py L140-172 (update_prompt_stats / update_rank),
e3/worker/temperature_scheduler.py]::

    allocation, budget n*|batch|:
        rank_x from the previous epoch end (none yet -> weight 0; only in epoch 1, where
        n_min = n_max = n, so everyone gets n)
        c_x = floor(n_min + (n|batch| - n_min|batch|) * rank_x / sum rank), capped at n_max
        leftover given to the highest-rank prompts one by one, up to n_max
    epoch end:
        rank_x = position / N in the pool sorted by mean accuracy, descending (0 = easiest;
                 never-sampled prompts have mean 0 and rank with the hardest)
        n_min = max(n_min - u, n_low); n_max = min(n_max + u, n_high)
    temperature, after each update with H = mean token entropy of the batch:
        first init_steps updates only record H* = mean H
        T <- T * (1 + T * ln(H*/H) / (ln V + ln ln V))
        last annealing_ratio of max_steps: H* = H0 * [(1-f) * 0.5 * (1 + cos(pi*prog)) + f]

Deviations:
  * Bug fix (the intended rule): the release does not cap the floored counts at n_max, so a
    prompt can get more than n_max when the rank mass is concentrated. rollwise caps them.
  * The temperature acts: E3's `sampling` hook sets it on every request of the step; each rollout
    carries the temperature it was sampled at and the learner scores it at that temperature.
    `set_temperature=False` only reports it (ctx.metrics["e3/temperature"], with "e3/entropy"
    and "e3/target_entropy"), as rollwise did before its planners could set sampling parameters.
    The rule needs the vocabulary size V (the `vocab_size` option, else ctx.policy's); with neither
    (the simulator) the temperature stays at t0.
  * [INF] An epoch is epoch_steps training steps (default ceil(|pool| / B)), counted by this
    component; the rank sort at an epoch end is O(pool log pool), once per epoch (amortised
    O(log pool) per prompt drawn); allocation itself is O(batch).
  * The README's length bias for the easiest 10% of prompts is not part of the paper; not done.

Defaults [CODE scripts/train_1_5b.sh]: n = 8, n_low = 4, n_high = 12, n_update = 2 (group-size
range per epoch [8,8], [6,10], [4,12]), T0 = 1.0, init_steps = 1, annealing ratio 0.4, factor 0.9,
max_steps 480 -> scaled to the embedded run's 150 steps (~2.4 epochs of a 2000-prompt pool at
B=32, close to the code's 3 epochs).
"""
from __future__ import annotations

import math

import numpy as np

from ..core.registry import register
from ..core.types import Batch, Group, Prompt
from .base import Component, StepContext
from .capabilities import SetsN


def rollout_counts(rank: np.ndarray, total: int, n_min: int, n_max: int, cap: bool = True) -> np.ndarray:
    """get_rollout_n_per_prompt; rank < 0 means 'no rank yet' (weight 0). cap=False reproduces the
    release (floored counts not capped at n_max)."""
    rank = np.where(np.asarray(rank, dtype=np.float64) < 0, 0.0, np.asarray(rank, dtype=np.float64))
    counts = np.full(len(rank), float(n_min))
    s = rank.sum()
    if s > 0:
        rank = rank / (s + 1e-8)
    counts = np.floor(counts + (total - counts.sum()) * rank).astype(np.int64)
    if cap:
        counts = np.minimum(counts, max(n_max, n_min))
    diff = total - int(counts.sum())
    if diff > 0:
        for i in np.argsort(-rank, kind="stable"):
            if counts[i] < n_max:
                add = min(diff, n_max - counts[i])
                counts[i] += add
                diff -= add
            if diff <= 0:
                break
    return counts


def epoch_ranks(total_reward: np.ndarray, count: np.ndarray) -> np.ndarray:
    """update_rank: position / N in the order of mean reward, descending (stable: ties keep id order)."""
    mean = np.where(count > 0, total_reward / np.maximum(count, 1), 0.0)
    order = np.argsort(-mean, kind="stable")
    rank = np.empty(len(mean), dtype=np.float32)
    rank[order] = np.arange(len(mean), dtype=np.float32) / max(len(mean), 1)
    return rank


class TemperatureScheduler:
    """E3's entropy-targeting temperature (temperature_scheduler.py), with annealing."""

    def __init__(self, t0: float = 1.0, init_steps: int = 1, max_steps: int = 150,
                 annealing: bool = True, annealing_ratio: float = 0.4, annealing_factor: float = 0.9,
                 target_entropy: float | None = None):
        self.t = float(t0)
        self.init_steps, self.max_steps = int(init_steps), int(max_steps)
        self.annealing, self.annealing_factor = bool(annealing), float(annealing_factor)
        self.annealing_step = self.max_steps - int(self.max_steps * annealing_ratio)
        self.steps = 1
        self.init_entropy: list[float] = []
        self.target = target_entropy
        self.initial_target = target_entropy

    def step(self, entropy: float, vocab_size: int) -> None:
        if self.steps <= self.init_steps:
            self.init_entropy.append(float(entropy))
        elif entropy > 0 and vocab_size > 2:
            if self.target is None:
                self.target = sum(self.init_entropy) / len(self.init_entropy)
                self.initial_target = self.target
            factor = math.log(vocab_size) + math.log(math.log(vocab_size))
            self.t = self.t * (1 + self.t * math.log(self.target / entropy) / factor)
            if self.annealing and self.steps >= self.annealing_step and self.max_steps > self.annealing_step:
                prog = (self.steps - self.annealing_step) / (self.max_steps - self.annealing_step)
                decay = (1 - self.annealing_factor) * 0.5 * (1 + math.cos(math.pi * prog)) + self.annealing_factor
                self.target = self.initial_target * decay
        self.steps += 1

    def state_dict(self) -> dict:
        return {"t": self.t, "steps": self.steps, "init_entropy": list(self.init_entropy),
                "target": self.target, "initial_target": self.initial_target}

    def load_state_dict(self, s: dict) -> None:
        self.t, self.steps = float(s["t"]), int(s["steps"])
        self.init_entropy = [float(x) for x in s["init_entropy"]]
        self.target = None if s["target"] is None else float(s["target"])
        self.initial_target = None if s["initial_target"] is None else float(s["initial_target"])


@register("planner", "e3", provenance="CODE+INF",
          summary="E3: rank-based rollout counts (hard prompts get more) + entropy-targeting sampling temperature")
class E3(Component):
    declares = (SetsN(),)

    def __init__(self, n_low: int = 4, n_high: int = 12, n_update: int = 2, epoch_steps: int | None = None,
                 cap: bool = True, t0: float = 1.0, init_steps: int = 1, max_steps: int = 150,
                 annealing: bool = True, annealing_ratio: float = 0.4, annealing_factor: float = 0.9,
                 vocab_size: int | None = None, set_temperature: bool = True):
        if not 1 <= n_low <= n_high or n_update < 0:
            raise ValueError("e3: need 1 <= n_low <= n_high and n_update >= 0")
        self.n_low, self.n_high, self.n_update = int(n_low), int(n_high), int(n_update)
        self.epoch_steps, self.cap, self.vocab_size = epoch_steps, bool(cap), vocab_size
        self.set_temperature = bool(set_temperature)
        self.temp = TemperatureScheduler(t0, init_steps, max_steps, annealing, annealing_ratio, annealing_factor)
        self.n_min: int | None = None  # start at n (set from ctx.n on first use)
        self.n_max: int | None = None
        self.total_reward: np.ndarray | None = None
        self.count: np.ndarray | None = None
        self.rank: np.ndarray | None = None  # -1 = no rank yet
        self.steps_done = 0
        self.epoch = 0

    def bind(self, pool_size: int) -> None:
        self.total_reward = np.zeros(pool_size, np.float64)
        self.count = np.zeros(pool_size, np.int64)
        self.rank = np.full(pool_size, -1.0, np.float32)

    def begin_step(self, ctx: StepContext) -> None:
        if self.n_min is None:
            self.n_min = self.n_max = int(ctx.n)

    def sampling(self, ctx: StepContext) -> dict:
        return {"temperature": float(self.temp.t)} if self.set_temperature else {}

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        if not prompts:
            return ns
        ids = np.array([p.id for p in prompts], dtype=np.int64)
        counts = rollout_counts(self.rank[ids], ctx.n * len(prompts), self.n_min, self.n_max, self.cap)
        ctx.metrics["e3/n_min"], ctx.metrics["e3/n_max"] = float(self.n_min), float(self.n_max)
        return [int(c) for c in counts]

    def end_epoch(self) -> None:
        self.n_min = max(self.n_min - self.n_update, self.n_low)
        self.n_max = min(self.n_max + self.n_update, self.n_high)
        self.rank = epoch_ranks(self.total_reward, self.count)
        self.epoch += 1

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        for g in groups:
            self.total_reward[g.prompt.id] += float(g.num_correct)
            self.count[g.prompt.id] += g.n
        # temperature from the update batch's mean token entropy
        toks = sum(r.num_tokens for r in batch.rollouts)
        if toks > 0:
            h = sum(r.entropy * r.num_tokens for r in batch.rollouts) / toks
            vocab = self.vocab_size or _vocab_size(ctx.policy)
            if vocab:
                self.temp.step(h, vocab)
            ctx.metrics["e3/entropy"] = float(h)
        ctx.metrics["e3/temperature"] = float(self.temp.t)
        if self.temp.target is not None:
            ctx.metrics["e3/target_entropy"] = float(self.temp.target)
        self.steps_done += 1
        epoch_steps = self.epoch_steps or max(1, math.ceil(len(ctx.pool) / max(ctx.batch_size, 1)))
        if self.steps_done % epoch_steps == 0:
            self.end_epoch()

    def state_dict(self) -> dict:
        return {"n_min": self.n_min, "n_max": self.n_max,
                "total_reward": None if self.total_reward is None else self.total_reward.copy(),
                "count": None if self.count is None else self.count.copy(),
                "rank": None if self.rank is None else self.rank.copy(),
                "steps_done": self.steps_done, "epoch": self.epoch, "temp": self.temp.state_dict()}

    def load_state_dict(self, s: dict) -> None:
        self.n_min = None if s["n_min"] is None else int(s["n_min"])
        self.n_max = None if s["n_max"] is None else int(s["n_max"])
        self.total_reward = None if s["total_reward"] is None else np.asarray(s["total_reward"], np.float64).copy()
        self.count = None if s["count"] is None else np.asarray(s["count"], np.int64).copy()
        self.rank = None if s["rank"] is None else np.asarray(s["rank"], np.float32).copy()
        self.steps_done, self.epoch = int(s["steps_done"]), int(s["epoch"])
        self.temp.load_state_dict(s["temp"])


def _vocab_size(policy) -> int | None:
    if policy is None:
        return None
    tok = getattr(policy, "tokenizer", None)
    if tok is not None:
        try:
            return int(len(tok))
        except TypeError:
            pass
    cfg = getattr(getattr(policy, "model", None), "config", None)
    v = getattr(cfg, "vocab_size", None)
    return int(v) if v else None
