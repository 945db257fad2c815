"""From a tiny run to a cluster profile's scale: each recorded step becomes the StepWork of the same step at the
profile's response lengths, and the step-time model (steptime.py) prices it in GPU-seconds.

WAVE4's rule, one function for every arm of a comparison:
  * a step's rows: `rollouts` generated this step (the difference of the cumulative count), in `prompts`
    groups; their response lengths from the row's shape (`len_mean`, `len_p50`, `len_p90`, `len_max`: records
    from 2026-12-05 on; an older record has none and gets no modelled figure);
  * the lengths at the profile's scale: every length x `factor`, where factor = the profile's mean
    generation length / the task's mean response length under tuned GRPO at its first step (the plan's
    baseline, mean over its seeds): the task's length shape is kept, and an arm's relative effects (shorter
    steps, aborted rows, long rounds) carry over;
  * prompts, and the tokens the learner trains on, scale by the same factor [INF: the prompt/response ratio
    of the task is kept];
  * the mode: the run's deployment mode (sync, one-step-off, async). Tail batching's long rounds are steps
    of their own in rollwise's rows, so its steps are priced as synchronous steps of what they held.

The rows from quantiles [INF]: n lengths at ranks (i + 0.5) / n on the piecewise-linear quantile function
through (0.5, p50), (0.9, p90), (1, max), and (0, lo) with lo chosen so that their mean is `len_mean` (clipped
to [1, p50]).

Variant 2 (WAVE4: "draw lengths from a published long-tail shape while keeping each row's rank within its
step"): one monotone map, the same for every arm of a plan, from the task's scaled lengths onto a published
long-tail shape. Its knots: the baseline's rows at its first trained step (every seed, rebuilt as above and x
factor), sorted, paired with a lognormal's quantiles at the same mid-ranks (i + 0.5) / m, rescaled to the same
mean. Between knots it interpolates; past the last (or below the first) it is proportional, so an arm's longer
rows stay longer. Being monotone it keeps every row's rank within its step, and an arm's relative effects
(shorter steps, aborted rows, a tail-batching round's narrower spread, long rounds) carry over. The shape's
source: reasoning-RL rollouts are long-tailed, a few responses far past the 75th percentile holding most of a
step's time [READ: TLT, Hu et al. 2025, arXiv:2511.16665, Fig. 1-2 (ByteDance 32B trace; "maximum far exceeds
the 75th percentile"); RollPacker, Gao et al. 2025, arXiv:2509.21009, Sec. 2 (rollout ~70% of step time,
skewed lengths)]. The lognormal form and its sigma are [INF]: neither paper tabulates a fitted parameter, so
LONGTAIL_SIGMA is an ASSUMPTION (the same 0.8 as the validation deployments in benchmarks/systems/), and
reports show the figures at x0.5 and x2 of it.

Rows without a length shape (records before 2026-12-05: every Bench 3.0 record) carry, per step, the decoded
tokens (`tokens`, cumulative; `step_tokens`) and the rows generated (`rollouts`, cumulative), so the step's
mean response length (decoded tokens / rows; on newer rows it equals `len_mean` exactly for a plain step), and
nothing about its spread. `fill_lengths` gives such rows a shape, labelled by what it assumes, and the
functions above then run on them unchanged:
  * "step mean" (variant 1's fallback): every row of a step at the step's mean length. It MISSES THE TAIL:
    a synchronous step at scale waits for its longest row, so its step time is a lower bound, and an arm's
    effect on the spread of lengths (an abort that cuts the tail, a long round) is seen only through its mean;
  * "step lognormal" (variant 2's fallback): the step's rows at the mid-rank quantiles (i + 0.5) / n of a
    lognormal with variant 2's assumed sigma, rescaled to the step's mean. Its tail is assumed, the same
    relative shape for every step and every arm, so an arm's effect on the spread is still not seen; variant
    2's map from the baseline's first step is not used (step-mean lengths would give it a single knot).
The filled rows keep the four shape fields (the fallback's own values) and say `len_source`; `row_lengths`
rebuilds a row's lengths from whichever it carries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from .profile import ClusterProfile
from .steptime import Round, StepWork, step_time

LENGTH_FIELDS = ("len_mean", "len_p50", "len_p90", "len_max")
LONGTAIL_SIGMA = 0.8  # ASSUMPTION (no source gives it; module docstring): the lognormal's sigma in variant 2


def lengths_from_shape(n: int, mean: float, p50: float, p90: float, top: float) -> np.ndarray:
    """n response lengths with the row's median, 90th percentile, maximum and (as near as the knots allow)
    its mean."""
    if n <= 0:
        return np.zeros(0)
    q = (np.arange(n) + 0.5) / n
    xs = np.array([0.0, 0.5, 0.9, 1.0])

    def at(lo):
        return np.interp(q, xs, [lo, p50, p90, top])

    a, b = at(0.0).mean(), at(1.0).mean()  # the mean is linear in lo: a + (b - a) * lo
    lo = (mean - a) / (b - a) if b != a else p50
    return at(float(np.clip(lo, min(1.0, p50), p50)))


@dataclass(frozen=True)
class LongTailMap:
    """Variant 2's map (module docstring): knots x (the baseline's first-step lengths, ascending, distinct) ->
    y (the lognormal quantiles at their mid-ranks, the same mean)."""
    x: np.ndarray
    y: np.ndarray

    def __call__(self, lengths) -> np.ndarray:
        L = np.asarray(lengths, float)
        out = np.interp(L, self.x, self.y)
        out = np.where(L < self.x[0], L * self.y[0] / self.x[0], out)
        return np.where(L > self.x[-1], L * self.y[-1] / self.x[-1], out)


def longtail_map(base_lengths, sigma: float) -> LongTailMap:
    """The map from pooled baseline lengths (> 0) onto a lognormal(sigma) of their mean; ties share one knot
    (their quantiles averaged), so the map stays a function."""
    x = np.sort(np.asarray(base_lengths, float))
    m = x.size
    if m == 0 or x[0] <= 0:
        raise ValueError("the long-tail map needs the baseline's first-step lengths, every one > 0")
    z = np.array([NormalDist().inv_cdf((i + 0.5) / m) for i in range(m)])
    y = np.exp(sigma * (z - z.max()))  # shifted for overflow; the rescaling removes the shift
    y *= x.mean() / y.mean()
    ux, inv = np.unique(x, return_inverse=True)
    uy = np.bincount(inv, weights=y) / np.bincount(inv)
    return LongTailMap(ux, uy)


def base_lengths(runs: list[list[dict]], factor: float) -> np.ndarray:
    """The baseline's rows at its first trained step, every seed, rebuilt from their shape and x factor."""
    out = []
    for rows in runs:
        r = min((r for r in rows if r.get("step", 0) > 0), key=lambda r: r["step"])
        before = max((x.get("rollouts", 0) for x in rows if x.get("step", 0) < r["step"]), default=0)
        out.append(factor * row_lengths(r, int(r["rollouts"] - before)))
    return np.maximum(np.concatenate(out), 1.0)


FALLBACKS = ("step mean", "step lognormal")  # fill_lengths' variants for rows without a shape (docstring)


def has_step_means(rows: list[dict]) -> bool:
    """Whether every trained row carries the cumulative decoded tokens and rows a step's mean is read from."""
    trained = [r for r in rows if r.get("step", 0) > 0]
    return bool(trained) and all(isinstance(r.get(k), (int, float)) for r in trained for k in ("tokens", "rollouts"))


def step_means(rows: list[dict]) -> list[float | None]:
    """Each row's mean response length over the rows it generated (decoded tokens / rows, both cumulative in
    the rows); None for step 0 and for a step that generated nothing."""
    out, prev = [], {"tokens": 0, "rollouts": 0}
    for r in rows:
        if r.get("step", 0) <= 0:
            out.append(None)
            continue
        for k in prev:
            if not isinstance(r.get(k), (int, float)):
                raise ValueError(f"metrics row of step {r['step']}: no {k!r} (a length needs decoded tokens and rows)")
        n, t = r["rollouts"] - prev["rollouts"], r["tokens"] - prev["tokens"]
        out.append(float(t) / n if n > 0 else None)
        prev = {k: r[k] for k in prev}
    return out


def lognormal_lengths(n: int, mean: float, sigma: float) -> np.ndarray:
    """n lengths at the mid-rank quantiles of a lognormal(sigma), rescaled to `mean` exactly."""
    if n <= 0:
        return np.zeros(0)
    z = np.array([NormalDist().inv_cdf((i + 0.5) / n) for i in range(n)])
    y = np.exp(sigma * (z - z.max()))  # shifted for overflow; the rescaling removes the shift
    return y * mean / y.mean()


def fill_lengths(rows: list[dict], how: str, sigma: float = LONGTAIL_SIGMA) -> list[dict]:
    """The rows with a length shape filled from each step's mean (module docstring: "step mean", or "step
    lognormal" at `sigma`), `len_source` naming it. A shape the rows carry is replaced too: when one run of a
    comparison has none, every run is read the same way."""
    if how not in FALLBACKS:
        raise ValueError(f"unknown length fallback {how!r} (known: {', '.join(FALLBACKS)})")
    out, before = [], 0
    for r, m in zip(rows, step_means(rows)):
        if r.get("step", 0) <= 0:
            out.append(r)
            continue
        n, before, m = int(r["rollouts"] - before), r["rollouts"], m or 0.0
        L = np.full(n, m) if how == "step mean" else lognormal_lengths(n, m, sigma)
        shape = (m, m, m, m) if n == 0 else (m, float(np.percentile(L, 50)), float(np.percentile(L, 90)),
                                             float(L.max()))
        out.append({**r, **dict(zip(LENGTH_FIELDS, shape)), "len_source": how,
                    **({"len_sigma": sigma} if how == "step lognormal" else {})})
    return out


def row_lengths(r: dict, n: int) -> np.ndarray:
    """A trained row's n response lengths: from its shape, or as its length fallback says (`len_source`)."""
    src = r.get("len_source")
    if src == "step mean":
        return np.full(max(n, 0), float(r["len_mean"]))
    if src == "step lognormal":
        return lognormal_lengths(n, float(r["len_mean"]), float(r["len_sigma"]))
    return lengths_from_shape(n, r["len_mean"], r["len_p50"], r["len_p90"], r["len_max"])


def has_lengths(rows: list[dict]) -> bool:
    return any(r.get("step", 0) > 0 for r in rows) and all(
        r.get(k) is not None for r in rows if r.get("step", 0) > 0 for k in LENGTH_FIELDS)


def base_mean_length(runs: list[list[dict]]) -> float:
    """The task's mean response length under the baseline at its first trained step, over its seeds."""
    firsts = [min((r for r in rows if r.get("step", 0) > 0), key=lambda r: r["step"])["len_mean"] for rows in runs]
    return float(np.mean(firsts))


PREV = ("rollouts", "prompt_tokens", "learner_tokens")  # the cumulative counts a step's work is the difference of


def step_work(r: dict, prev: dict, factor: float, longtail: LongTailMap | None = None) -> StepWork:
    """One trained row's StepWork at the profile's scale; `prev`: the cumulative counts (PREV) of the trained
    row before it (zeros for the first)."""
    n = int(r["rollouts"] - prev.get("rollouts", 0))
    groups = max(int(r.get("prompts") or 1), 1)
    lengths = factor * row_lengths(r, n)
    lengths = np.round(lengths if longtail is None else longtail(lengths))
    prompt = factor * (r.get("prompt_tokens", 0) - prev.get("prompt_tokens", 0)) / groups
    trained = factor * (r.get("learner_tokens", 0) - prev.get("learner_tokens", 0))
    gid = np.arange(n) * groups // max(n, 1)  # rows of one group side by side
    return StepWork([Round(np.maximum(lengths, 1).astype(np.int64), np.full(n, prompt), gid)], trained)


def step_works(rows: list[dict], factor: float, longtail: LongTailMap | None = None) -> list[StepWork]:
    """Each trained row's StepWork at the profile's scale (rows in step order); variant 2 when `longtail` is
    given (module docstring)."""
    out, prev = [], dict.fromkeys(PREV, 0)
    for r in rows:
        if r.get("step", 0) <= 0:
            continue
        out.append(step_work(r, prev, factor, longtail))
        prev = {k: r.get(k, 0) for k in PREV}
    return out


@dataclass
class GpuMeter:
    """A run's modelled GPU-seconds so far, one metrics row at a time: every GPU of the deployment for each
    trained step (step 0 adds nothing). `gpu_seconds` is this meter over a run's rows, so a run that ends on a
    GPU-second budget (run/budget.py) counts exactly what the reports read afterwards, and a resumed run
    recounts its recorded rows to the same total."""
    profile: ClusterProfile
    factor: float
    mode: str
    longtail: LongTailMap | None = None
    total: float = 0.0
    prev: dict = field(default_factory=lambda: dict.fromkeys(PREV, 0))

    def add(self, r: dict) -> float:
        """The cumulative GPU-seconds once row `r` (the next in step order) is counted."""
        if r.get("step", 0) > 0:
            work = step_work(r, self.prev, self.factor, self.longtail)
            self.total += step_time(self.profile, work, self.mode).step_s * self.profile.gpus
            self.prev = {k: r.get(k, 0) for k in PREV}
        return self.total


def gpu_seconds(rows: list[dict], profile: ClusterProfile, factor: float, mode: str,
                longtail: LongTailMap | None = None) -> list[float]:
    """Cumulative modelled GPU-seconds at each row (step 0 at 0): every GPU of the deployment for the step."""
    meter = GpuMeter(profile, factor, mode, longtail)
    return [meter.add(r) for r in rows]


def mode_of(config: dict) -> str:
    """The step-time model's mode for a run's config: its deployment mode (tail batching's steps are sync)."""
    return config.get("mode", "sync") if config.get("mode") in ("one-step-off", "async") else "sync"
