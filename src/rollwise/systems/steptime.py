"""The step-time model: seconds per RL step on a cluster profile, from a step's recorded work.

Every formula is here, in one place. [INF] tags mark modelling choices no paper states for this use.

Generation (continuous batching, one engine = `tp` GPUs, `engines` = gpus // tp of them):
  * a round's rows go to the engines round-robin; an engine decodes at most `concurrency` rows at once,
    a finished row's slot taken by the next queued row (list scheduling, queue order);
  * one decode iteration with b active rows holding C context tokens costs
        t_iter(b, C) = max((W + C * kv) / (tp * bw),  2 N b (1 + k) / (tp * peak * mfu_decode)) + overhead
    (memory-bound: weights and KV read once per iteration; compute-bound: 2N FLOPs per token, with k
    draft tokens verified per row when drafting). So the long tail pays nearly a full iteration per
    token: b = 1 still reads all W bytes;
  * prefill is compute-bound: 2 N P / (tp * peak * mfu_prefill) per prompt, once per request when the n
    rows share the prompt's prefill, else once per row; an engine prefills before it decodes [INF];
  * drafts: a row whose tokens were accepted at a mean of `a` per verification step decodes in
    ceil(L / (1 + a)) iterations, each verifying 1 + k tokens;
  * aborted rows are given with the tokens they decoded, and cost exactly that;
  * a step's sequential rounds (stages, refills, pilots) add their times; the round's time is its
    slowest engine's.
Training on `train_gpus`: 6 N per trained token at mfu_train; old/ref log-prob passes 2 N per token each.
Weight sync: the profile's `weight_sync_s` per step. Reward: `reward_s` per step (given by the caller).

Deployment modes (the same work, four schedules):
  * sync: colocated; every GPU generates, then every GPU trains: gen + logprob + train + sync.
  * one-step-off: gen_gpus generate step t+1 while the rest train step t (NeMo-RL, verl):
        max(gen on gen_gpus, logprob + train on the rest) + sync.
  * async (fully async with partial rollouts, staleness S >= 1): generation never waits on a batch
    barrier; its slots stay full, so a step's generation costs its tokens at full occupancy:
        gen = (tokens / engines / b) iterations at t_iter(b, mean context), b = min(concurrency, rows/engine)
    and the step costs max(gen, logprob + train) + sync [INF: steady state, the staleness bound never binds].
  * tail: tail batching (RollPacker): a round stops when `keep` of its groups are complete (the short
    round); the unfinished rows' remaining tokens are decoded later at full occupancy (the long round)
    and charged to this step: gen = short round + remaining tokens at full occupancy [INF].
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from .profile import ClusterProfile

MODES = ("sync", "one-step-off", "async", "tail")


@dataclass
class Round:
    """One generation round: per row its response length (decoded tokens), prompt length and group id."""
    lengths: np.ndarray
    prompt_lengths: np.ndarray
    groups: np.ndarray | None = None      # group id per row (tail batching completes whole groups)
    accepted_per_step: float = 0.0        # drafts: mean tokens accepted per verification step
    draft_k: int = 0                      # drafts proposed per verification step
    shared_prefill: bool = True           # the rows of one group prefill their prompt once


@dataclass
class StepWork:
    rounds: list[Round]
    trained_tokens: float                 # prompt + response tokens the learner trains on
    logprob_passes: int = 1               # old policy (and reference) forward passes over them
    reward_s: float = 0.0
    keep_groups: int | None = None        # tail batching: groups the step trains on


@dataclass
class StepTime:
    generation_s: float
    training_s: float
    sync_s: float
    reward_s: float
    step_s: float
    idle_s: float = 0.0                   # GPU-seconds with nothing to do, per GPU (the schedule's bubble)
    detail: dict = field(default_factory=dict)


def iteration_s(p: ClusterProfile, active, context, k: int = 0):
    """Seconds of decode iterations with `active` rows holding `context` tokens (arrays broadcast)."""
    memory = (p.weight_bytes + np.asarray(context, float) * p.kv_bytes_per_token) / (p.tp * p.mem_bw)
    compute = 2 * p.params * np.asarray(active, float) * (1 + k) / (p.tp * p.peak_flops * p.mfu_decode)
    return np.maximum(memory, compute) + p.iter_overhead_s


def engine_decode_s(p: ClusterProfile, lengths, prompts, k: int = 0) -> float:
    """One engine's decode of rows (decode iterations each, prompt lengths) in queue order."""
    L = np.asarray(lengths, np.int64)
    P = np.asarray(prompts, float)
    if L.size == 0 or L.max() <= 0:
        return 0.0
    # start iteration of each row under list scheduling on `concurrency` slots
    start = np.zeros(len(L), np.int64)
    if len(L) > p.concurrency:
        heap = [int(x) for x in L[: p.concurrency]]
        heapq.heapify(heap)
        for j in range(p.concurrency, len(L)):
            start[j] = heapq.heappop(heap)
            heapq.heappush(heap, int(start[j] + L[j]))
    end = start + L
    horizon = int(end.max())
    # difference arrays: active rows, and the sum over active rows of (P_j - start_j) per iteration
    d_active = np.zeros(horizon + 1)
    d_base = np.zeros(horizon + 1)
    np.add.at(d_active, start, 1.0)
    np.add.at(d_active, end, -1.0)
    np.add.at(d_base, start, P - start)
    np.add.at(d_base, end, -(P - start))
    active = np.cumsum(d_active)[:horizon]
    iters = np.arange(horizon)
    context = np.cumsum(d_base)[:horizon] + active * iters  # each row holds P_j + (iteration - start_j) tokens
    return float(iteration_s(p, active, context, k).sum())


def _engine_rows(n_rows: int, engines: int) -> list[np.ndarray]:
    return [np.arange(e, n_rows, engines) for e in range(engines)]


def round_s(p: ClusterProfile, rnd: Round, engines: int) -> float:
    """A round's seconds: its slowest engine's prefill plus decode."""
    L = np.asarray(rnd.lengths, float)
    if L.size == 0:
        return 0.0
    iters = np.ceil(L / (1.0 + rnd.accepted_per_step)).astype(np.int64)
    P = np.asarray(rnd.prompt_lengths, float)
    groups = np.arange(len(L)) if rnd.groups is None or not rnd.shared_prefill else np.asarray(rnd.groups)
    worst = 0.0
    for rows in _engine_rows(len(L), engines):
        if rows.size == 0:
            continue
        _, first = np.unique(groups[rows], return_index=True)  # one prefill per group on this engine
        prefill = 2 * p.params * P[rows][first].sum() / (p.tp * p.peak_flops * p.mfu_prefill)
        worst = max(worst, prefill + engine_decode_s(p, iters[rows], P[rows], rnd.draft_k))
    return worst


def train_s(p: ClusterProfile, work: StepWork, gpus: int) -> float:
    flops = (6 + 2 * work.logprob_passes) * p.params * work.trained_tokens
    return flops / (gpus * p.peak_flops * p.mfu_train)


def full_occupancy_s(p: ClusterProfile, tokens: float, rows: int, mean_context: float, engines: int) -> float:
    """Decoding `tokens` with every slot busy: tokens / (engines * b) iterations at b active rows."""
    if tokens <= 0:
        return 0.0
    b = max(1, min(p.concurrency, math.ceil(rows / engines)))
    return float(tokens / (engines * b) * iteration_s(p, b, b * mean_context))


def _tail_round_s(p: ClusterProfile, rnd: Round, keep: int, engines: int) -> tuple[float, float]:
    """Tail batching: the short round stops when `keep` groups are complete; -> (short round s, the
    remaining tokens' seconds at full occupancy)."""
    L = np.asarray(rnd.lengths, np.int64)
    g = np.arange(len(L)) if rnd.groups is None else np.asarray(rnd.groups)
    ids, inv = np.unique(g, return_inverse=True)
    done_at = np.zeros(len(ids), np.int64)
    np.maximum.at(done_at, inv, L)
    keep = min(max(keep, 1), len(ids))
    stop = int(np.sort(done_at)[keep - 1])
    short = Round(np.minimum(L, stop), rnd.prompt_lengths, rnd.groups, rnd.accepted_per_step, rnd.draft_k,
                  rnd.shared_prefill)
    rest = np.maximum(L - stop, 0)
    ctx = float(np.mean(np.asarray(rnd.prompt_lengths, float) + stop + rest / 2)) if rest.any() else 0.0
    return round_s(p, short, engines), full_occupancy_s(p, float(rest.sum()), int((rest > 0).sum()), ctx, engines)


def step_time(p: ClusterProfile, work: StepWork, mode: str = "sync") -> StepTime:
    """Seconds of one step of `work` under `mode` on profile `p` (formulas in the module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown deployment mode {mode!r} (known: {', '.join(MODES)})")
    split = mode in ("one-step-off", "async")
    gen_gpus = p.gen_gpus if split else p.gpus
    if split and gen_gpus >= p.gpus:
        raise ValueError(f"mode {mode!r} needs gen_gpus < gpus (profile {p.name}: {p.gen_gpus} of {p.gpus})")
    engines = max(1, gen_gpus // p.tp)
    train_gpus = p.gpus - gen_gpus if split else p.gpus
    detail: dict = {}
    if mode == "async":
        tokens = sum(float(np.sum(r.lengths)) for r in work.rounds)
        rows = sum(len(r.lengths) for r in work.rounds)
        ctx = float(np.mean(np.concatenate([np.asarray(r.prompt_lengths, float) + np.asarray(r.lengths) / 2
                                            for r in work.rounds]))) if rows else 0.0
        gen = full_occupancy_s(p, tokens, rows, ctx, engines)
    elif mode == "tail":
        if work.keep_groups is None:
            raise ValueError("mode 'tail' needs the step's keep_groups (the groups it trains on)")
        *earlier, last = work.rounds
        short, long_ = _tail_round_s(p, last, work.keep_groups, engines)
        gen = sum(round_s(p, r, engines) for r in earlier) + short + long_
        detail.update(short_round_s=short, long_round_s=long_)
    else:
        gen = sum(round_s(p, r, engines) for r in work.rounds)
    train = train_s(p, work, train_gpus)
    if split:
        step = max(gen, train) + p.weight_sync_s + work.reward_s
        idle = abs(gen - train)
    else:
        step = gen + train + p.weight_sync_s + work.reward_s
        idle = 0.0
    return StepTime(gen, train, p.weight_sync_s, work.reward_s, step, idle, detail)
