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
