"""System timing of a generation round: decode time per token against concurrency, plus prefill.

Model (a linear roofline of continuous-batching decoding, one round = one engine call):

  * the round's samples are split into `engines` contiguous chunks of (almost) equal size, one per
    data-parallel rollout engine (as verl splits a batch across its vLLM workers); the round ends
    when the slowest engine ends: round_s = max_e engine_s(e).
  * an engine runs at most `concurrency` sequences at once (continuous batching: a finished sequence
    frees its slot for the next queued one, in order). One decode iteration with c active sequences
    costs  iter_s + token_s * c + kv_s * (context tokens of the c sequences):
      iter_s  fixed cost per iteration (reading the weights: memory-bound decode),
      token_s compute per decoded token,
      kv_s    attention/KV-cache read per context token per decoded token.
    Summed over the iterations of engine e (closed form, no per-iteration loop):
      decode_s(e) = iter_s * M_e + token_s * sum_j L_j + kv_s * sum_j (P_j L_j + L_j (L_j - 1) / 2)
    where M_e is the number of decode iterations, the makespan of the engine's sequences on its
    slots: max_j L_j when they all fit (the usual case), else the list-scheduling makespan.
  * prefill_s(e) = prefill_s_per_token * (prompt tokens of e's requests; one prefill per request,
    its n samples share the prefix, as the ledger counts prompt tokens).
  * engine_s(e) = prefill_s(e) + decode_s(e).

So the wall time of a round is governed by its longest rollouts: iter_s * max L is paid whether one
sequence or a thousand are still running (long-tail stalls); `util` reports the fraction of the
slot-iterations of the round's wall time that decoded a token.

Learner time: train_s = learn_s_per_token * learner tokens / engines (forward + backward on the
same devices, ~3x a prefill token).

Defaults are order-of-magnitude figures for a 7B dense model in bf16 on one H100-class GPU per
engine (weights 14 GB at ~3 TB/s ~ 5 ms per iteration; 14 GFLOP per token at ~400 TFLOP/s; a
GQA KV cache of ~57 kB per token). They are not calibrated; pass your own TimingConfig.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np


@dataclass
class TimingConfig:
    engines: int = 8
    concurrency: int = 1024  # max sequences decoded at once per engine
    iter_s: float = 6e-3
    token_s: float = 3.5e-5
    kv_s: float = 2e-8
    prefill_s_per_token: float = 3e-5
    learn_s_per_token: float = 9e-5


@dataclass
class RoundTiming:
    seconds: float
    prefill_s: float
    makespan: int  # decode iterations of the slowest engine
    tokens: int
    util: float


def makespan(lengths, slots: int) -> int:
    """Decode iterations to finish `lengths` (in queue order) on `slots` continuous-batching slots."""
    lengths = np.asarray(lengths)
    if len(lengths) == 0:
        return 0
    if len(lengths) <= slots:
        return int(lengths.max())
    ls = lengths.tolist()
    heap = ls[:slots]
    heapq.heapify(heap)
    for L in ls[slots:]:
        heapq.heapreplace(heap, heap[0] + L)  # the next sequence takes the first slot that frees
    return max(heap)


class TimingModel:
    def __init__(self, cfg: TimingConfig | None = None):
        self.cfg = cfg or TimingConfig()
        if self.cfg.engines < 1 or self.cfg.concurrency < 1:
            raise ValueError("sim timing: engines and concurrency must be >= 1")

    def round(self, lengths: np.ndarray, prompt_len: np.ndarray, prefill_tokens: np.ndarray) -> RoundTiming:
        """One generation round. Per sample: response length L_j, its prompt length P_j, and the
        prompt tokens prefilled on its behalf (P / n for each of a request's n samples)."""
        c = self.cfg
        T = len(lengths)
        if T == 0:
            return RoundTiming(0.0, 0.0, 0, 0, 1.0)
        E = min(c.engines, T)
        bounds = (np.arange(E) * T) // E  # contiguous chunks of (almost) equal size
        L = lengths.astype(np.float64)
        tok = np.add.reduceat(L, bounds)
        kv = np.add.reduceat(prompt_len * L + L * (L - 1) / 2, bounds)
        pre = np.add.reduceat(prefill_tokens.astype(np.float64), bounds) * c.prefill_s_per_token
        sizes = np.diff(np.append(bounds, T))
        if sizes.max() <= c.concurrency:
            ms = np.maximum.reduceat(lengths, bounds).astype(np.float64)
        else:
            ms = np.array([makespan(lengths[b: b + s], c.concurrency) for b, s in zip(bounds, sizes)], np.float64)
        eng = pre + c.iter_s * ms + c.token_s * tok + c.kv_s * kv
        e = int(np.argmax(eng))
        wall = float(eng[e])
        # slot-iterations available during the wall time of the round's slowest engine's decode
        denom = float(np.minimum(sizes, c.concurrency).sum()) * float(ms.max())
        util = float(tok.sum()) / denom if denom > 0 else 1.0
        return RoundTiming(wall, float(pre[e]), int(ms.max()), int(tok.sum()), util)

    def learn_seconds(self, learner_tokens: int) -> float:
        return self.cfg.learn_s_per_token * learner_tokens / self.cfg.engines


# ---- asynchronous and partial rollouts at scale ---------------------------------------------------
# A step-level model of the three ways to run a GRPO step, over the same per-row lengths. [INF] It keeps
# the round model's cost terms (iter_s per decode iteration, token_s per token) and adds two assumptions
# the papers state for their own systems:
#   * partial rollouts (APRIL): (1 + over) * B groups start together on continuous-batching slots; the
#     round stops at the iteration where the B-th group completes; every row then unfinished keeps its
#     tokens and finishes in the next step (nothing is thrown away), so in steady state a step pays the
#     iterations up to that quantile instead of the longest row's;
#   * asynchronous generation (AReaL): generation and training run on disjoint devices, generation never
#     waits for a batch barrier (slots are refilled as rows finish, within the staleness bound), so a
#     step costs max(generation at full slot occupancy, training) instead of their sum at the makespan.
# Weight synchronisation and the learner's extra importance-weight work are not modelled (both small
# at this scale in AReaL's profile), nor is the gain or loss in accuracy per token: this says what
# the same settings do to wall time, not to learning.

def sync_step_seconds(lengths_GN: np.ndarray, cfg: TimingConfig) -> float:
    """verl-style synchronous step on `cfg.engines` devices: one generation round (its slowest engine
    sets the time) then training on the same devices."""
    L = lengths_GN.reshape(-1)
    model = TimingModel(cfg)
    return model.round(L, np.zeros(len(L)), np.zeros(len(L))).seconds + model.learn_seconds(int(L.sum()))


def april_round(remaining_GN: np.ndarray, need: int, cfg: TimingConfig):
    """One APRIL round over groups [G, n] of remaining row lengths, all started together: it stops at
    the iteration where the `need`-th group completes (a group completes with its longest row).
    -> (generation seconds, mask of the groups complete, remaining lengths after the round)."""
    L = remaining_GN.astype(np.float64)
    done_at = L.max(axis=1)
    t_stop = np.sort(done_at)[min(need, len(done_at)) - 1]
    decoded = np.minimum(L, t_stop).sum()
    seconds = cfg.iter_s * t_stop + cfg.token_s * decoded / cfg.engines
    return seconds, done_at <= t_stop, np.maximum(L - t_stop, 0)


def april_steady_state(draw, batch: int, overprovision: float, cfg: TimingConfig, steps: int = 50) -> dict:
    """APRIL over `steps` steps: each round runs the carried groups first, then fresh ones from
    `draw(k) -> lengths [k, n]` up to (1 + overprovision) * batch; `batch` complete groups train (the
    rest stay carried, their decoded tokens kept). -> mean step seconds and trained tokens per step."""
    carried_full, carried_rest = np.zeros((0, 0)), np.zeros((0, 0))
    total_s, trained = 0.0, 0.0
    for _ in range(steps):
        k = max(int(np.ceil(batch * (1 + overprovision))) - len(carried_full), 0)
        fresh = draw(k)
        full = fresh if not len(carried_full) else np.vstack([carried_full, fresh])
        rest = fresh if not len(carried_rest) else np.vstack([carried_rest, fresh])
        gen_s, complete, left = april_round(rest, batch, cfg)
        take = np.flatnonzero(complete)[:batch]
        keep = np.setdiff1d(np.arange(len(full)), take)
        tokens = full[take].sum()
        total_s += gen_s + cfg.learn_s_per_token * tokens / cfg.engines
        trained += tokens
        carried_full, carried_rest = full[keep], left[keep]
    return {"step_s": total_s / steps, "tokens_per_step": trained / steps}


def async_step_seconds(tokens_per_step: float, rows_per_step: int, cfg: TimingConfig,
                       gen_share: float = 0.75) -> float:
    """AReaL-style step in steady state: generation on gen_share of the devices with its slots kept
    full (a slot-iteration decodes one token; rows are refilled as they finish, within the staleness
    bound), training on the rest; the slower of the two sets the pace."""
    e_gen = max(1, int(round(cfg.engines * gen_share)))
    e_train = max(1, cfg.engines - e_gen)
    slots = min(cfg.concurrency, max(1, rows_per_step // e_gen))
    per_iter = cfg.iter_s + cfg.token_s * slots
    gen_s = tokens_per_step / (e_gen * slots) * per_iter
    learn_s = cfg.learn_s_per_token * tokens_per_step / e_train
    return max(gen_s, learn_s)
