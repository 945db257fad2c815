"""Bench statistics: what a planner's accuracy-vs-tokens curve says against GRPO's, with intervals.

Pure functions over a run's metrics rows (one dict per step, as `metrics.jsonl` holds them). Only the
rows that carry `eval_acc` matter here; their `tokens` is the cumulative generated tokens counted
against the budget. Nothing assumes a fixed spacing of evaluations in steps or in tokens.

The figures, from most to least robust:
- **Mean accuracy over the budget** (`auc`): the area under the accuracy-vs-tokens curve from 0 to the
  budget, divided by the budget. It uses every evaluation, so one noisy eval moves it little. It is the
  headline: a planner that learns faster per token has a higher curve, hence a higher area.
- **Accuracy at 25/50/75/100% of the budget** (`acc_at_fractions`): the curve read at those points.
- **Tokens-to-target** (`tokens_to_target_ratio`): how many tokens GRPO needs to reach its own mean
  final accuracy, divided by how many the planner needs. Kept because it is the papers' figure, but it
  is fragile: where curves are flat near the target a small move of the target moves the crossing a lot.

Every difference against GRPO is paired by seed (planner seed k against GRPO seed k), and its 95%
interval is a percentile bootstrap over seeds. With few seeds such an interval is too narrow (it covers
the truth less often than 95%); `verdict` states a verdict only from MIN_SEEDS_FOR_VERDICT seeds on.

Bench 3.0 (a preregistered plan, bench/plan.py) adds, at the end of this file: the two-sided paired
sign-flip permutation test (`sign_flip_p`, exact up to 16 seeds), Holm's step-down adjustment over the
plan's family (`holm`), the power calculation that picks the number of seeds (`seeds_needed`), and the
goal figure, compute-to-target on raw mean curves with its sensitivity to the target
(`compute_to_target`). They are hand-written in numpy (a few lines each) rather than taken from SciPy
or statsmodels, which rollwise does not otherwise need.
"""
from __future__ import annotations

import numpy as np

FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # of the budget, where accuracy differences are read
SMOOTH_EVALS = 3  # evals per running-mean window of the smoothed curve (tokens-to-target only)
MIN_SEEDS_FOR_VERDICT = 5
BOOTSTRAP_SAMPLES = 2000


# ---------------------------------------------------------------------------------------------------
# One run's curve


def eval_curve(rows: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """The run's measured held-out accuracy: (tokens, accuracy) at each evaluation, in token order.

    It must start with the step-0 evaluation at 0 tokens, the base checkpoint that every curve starts
    from. Evaluations at the same token count (a run that stalled and spent nothing between two evals)
    keep the latest one, so that tokens are strictly increasing."""
    ev = sorted(((r["tokens"], r["step"], r["eval_acc"]) for r in rows if "eval_acc" in r))
    if not ev or ev[0][0] != 0:
        raise ValueError("a bench run needs its step-0 evaluation at 0 tokens (the base accuracy)")
    t = np.array([e[0] for e in ev], dtype=float)
    a = np.array([e[2] for e in ev], dtype=float)
    keep = np.append(t[1:] != t[:-1], True)  # the last eval of each token count
    return t[keep], a[keep]


def acc_at(rows: list[dict], tokens):
    """Held-out accuracy after `tokens` generated tokens, by linear interpolation between evaluations.

    Past the last evaluation the last measured accuracy is held. A bench run stops at the first step
    boundary at or past the budget and evaluates there, so reading at the budget normally interpolates
    between the last two evals; `covers_budget` says whether a run's evals do reach the budget (a run
    that stalled or was cut short does not, and then its value at the budget is a held one)."""
    t, a = eval_curve(rows)
    return np.interp(tokens, t, a)


def covers_budget(rows: list[dict], budget: float) -> bool:
    """Whether the run has an evaluation at or past the budget (else figures at the budget are held)."""
    return bool(eval_curve(rows)[0][-1] >= budget)


def clip_curve(t: np.ndarray, a: np.ndarray, budget: float) -> tuple[np.ndarray, np.ndarray]:
    """The polyline (t, a) on [0, budget]: points past the budget dropped, a point added at exactly the
    budget (interpolated, or the held last value if the curve ends before it)."""
    inside = t < budget
    return np.append(t[inside], budget), np.append(a[inside], np.interp(budget, t, a))


def area_under_curve(t: np.ndarray, a: np.ndarray, budget: float) -> float:
    """Mean of the piecewise-linear curve (t, a) over [0, budget]: its area (trapezoids) / budget."""
    t, a = clip_curve(t, a, budget)
    return float(np.sum((a[1:] + a[:-1]) / 2 * np.diff(t)) / budget)


def auc(rows: list[dict], budget: float) -> float:
    """Mean held-out accuracy over the budget: the area under the run's interpolated accuracy-vs-tokens
    curve from 0 to the budget, divided by the budget. 0.50 means the run averaged 50% accuracy over its
    tokens; a planner that gets to the same final accuracy sooner has a higher value."""
    return area_under_curve(*eval_curve(rows), budget)


def acc_at_fractions(rows: list[dict], budget: float, fractions=FRACTIONS) -> np.ndarray:
    """Held-out accuracy read (interpolated) at each fraction of the budget; 1.0 is the exact budget."""
    return np.asarray(acc_at(rows, np.asarray(fractions, dtype=float) * budget), dtype=float)


def smooth_curve(rows: list[dict], k: int = SMOOTH_EVALS) -> tuple[np.ndarray, np.ndarray]:
    """The run's curve smoothed by a running mean over k evaluations, for tokens-to-target.

    Point j is the mean of evals j-k+1..j in both tokens and accuracy (fewer at the start, where the
    window includes the step-0 base eval): each mean sits at the mean token count of its window, not at
    its newest eval, so it does not lag on a straight stretch of curve however the evals are spaced
    (planners' eval spacings in tokens differ). A running mean cuts the noise of every point by about
    sqrt(k). An isotonic (monotone) fit was the alternative: it removes dips, but a rising curve is left
    as measured, noise included, and the final eval the target is read from is exactly that noise.

    The cost: the smoothed curve ends at its last window's mean, about one eval spacing before the last
    eval, and is held flat from there; a rising curve reads a little low at the budget, alike for all."""
    t, a = eval_curve(rows)
    ct, ca = np.cumsum(t), np.cumsum(a)
    j = np.arange(len(t))
    lo = np.maximum(j - k + 1, 0)  # first eval of each window
    n = j - lo + 1
    prev_t = np.where(lo > 0, ct[lo - 1], 0.0)
    prev_a = np.where(lo > 0, ca[lo - 1], 0.0)
    return (ct - prev_t) / n, (ca - prev_a) / n


def first_crossing(t: np.ndarray, values: np.ndarray, target) -> np.ndarray:
    """Where the polyline (t, values) first reaches target (linearly interpolated within the segment
    that crosses it); inf where it never does. values may be 2-D (one curve per row, all on the grid t)
    with one target per row; t[0] is returned where a curve starts at or above its target."""
    v = np.atleast_2d(values)
    tgt = np.broadcast_to(np.asarray(target, dtype=float), (v.shape[0],))[:, None]
    hit = v >= tgt
    g = hit.argmax(axis=1)  # first grid point at or above the target (0 if none: masked below)
    rows = np.arange(v.shape[0])
    prev = np.maximum(g - 1, 0)
    v0, v1 = v[rows, prev], v[rows, g]
    frac = np.where(v1 > v0, (tgt[:, 0] - v0) / np.where(v1 > v0, v1 - v0, 1.0), 0.0)
    cross = np.where(g == 0, t[0], t[prev] + frac * (t[g] - t[prev]))
    out = np.where(hit.any(axis=1), cross, np.inf)
    return out if np.ndim(values) == 2 else out[0]


def tokens_to_target(rows: list[dict], target: float, budget: float, k: int = SMOOTH_EVALS) -> float:
    """Generated tokens at which the run's smoothed curve first reaches target, within the budget
    (inf if it does not)."""
    t, a = clip_curve(*smooth_curve(rows, k), budget)
    return float(first_crossing(t, a, target))


# ---------------------------------------------------------------------------------------------------
# Paired comparisons against GRPO, with bootstrap intervals over seeds


def percentile_interval(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The bootstrap percentile interval, taking actual sample values (no interpolation: a sample may be
    inf, and interpolating with inf gives nan)."""
    q = (1 - level) / 2 * 100
    return (float(np.percentile(samples, q, method="lower")),
            float(np.percentile(samples, 100 - q, method="higher")))


def resample_indices(n: int, rng: np.random.Generator, samples: int = BOOTSTRAP_SAMPLES) -> np.ndarray:
    """samples x n seed indices drawn with replacement; the same indices pick GRPO's and the planner's run."""
    return rng.integers(0, n, size=(samples, n))


def paired_difference(base, other, rng: np.random.Generator, samples: int = BOOTSTRAP_SAMPLES) -> dict:
    """Mean over seeds of (planner - GRPO) on the same seed, with a 95% bootstrap interval: seed indices
    are resampled, and each drawn seed brings both its runs. base[i] and other[i] are seed i's values.
    Returns {"diff", "lo", "hi"}; lo > 0 means the planner's figure is higher than GRPO's."""
    d = np.asarray(other, dtype=float) - np.asarray(base, dtype=float)
    if d.size == 0:
        raise ValueError("no seed has runs of both planners")
    means = d[resample_indices(len(d), rng, samples)].mean(axis=1)
    lo, hi = percentile_interval(means)
    return {"diff": float(d.mean()), "lo": lo, "hi": hi}


# Student's t, 97.5th percentile, by degrees of freedom 1..11 (any table; scipy.stats.t.ppf(0.975, df))
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201)
T_INTERVAL_BELOW = 12  # seeds: below this the percentile bootstrap is too narrow (issue 47, item 6)


def t_interval(diffs) -> dict | None:
    """The 95% t interval of the mean of paired differences, for 2..11 seeds (None otherwise): with few
    seeds the percentile bootstrap treats the sample as the population and comes out too narrow (the
    Llama plan: bootstrap [-0.016, +0.012] against t [-0.020, +0.016])."""
    d = np.asarray(diffs, dtype=float)
    if not 2 <= d.size < T_INTERVAL_BELOW:
        return None
    half = T975[d.size - 2] * d.std(ddof=1) / np.sqrt(d.size)
    return {"diff": float(d.mean()), "lo": float(d.mean() - half), "hi": float(d.mean() + half)}


def _on_grid(curves: list[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """Each curve (held past its ends) evaluated on the grid: one row per curve."""
    return np.array([np.interp(grid, t, a) for t, a in curves])


def _ratio(tokens_base: np.ndarray, tokens_planner: np.ndarray) -> np.ndarray:
    """GRPO's tokens-to-target / the planner's. 0 where the planner never reaches the target (whatever
    GRPO does), inf where only GRPO never does."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = tokens_base / tokens_planner
    return np.where(np.isinf(tokens_planner), 0.0, np.where(tokens_planner == 0, np.inf, r))


def tokens_to_target_ratio(base_runs: list[list[dict]], planner_runs: list[list[dict]], budget: float,
                           rng: np.random.Generator, target: float | None = None,
                           samples: int = BOOTSTRAP_SAMPLES, k: int = SMOOTH_EVALS,
                           target_shift: float = 0.0) -> dict:
    """Tokens-to-target as a ratio against GRPO, with a 95% bootstrap interval whose target is itself
    uncertain. base_runs[i] and planner_runs[i] are seed i's runs (rows).

    Each side's tokens-to-target is where the mean over its seeds of their smoothed curves first reaches
    the target, within the budget: averaging curves, not crossings, means one seed that ends just under
    the target does not make a side "never reach". The target, unless given, is GRPO's mean smoothed
    accuracy at the budget, so GRPO's mean curve always reaches it (at the budget at the latest).

    In each bootstrap resample the seed indices are drawn once for both sides, the target is recomputed
    from the drawn GRPO runs, and both crossings are read again. Ratio = GRPO's tokens / the planner's
    (> 1: the planner needs fewer); 0 where the planner's mean curve never reaches the target, so the
    interval's lower end is 0 exactly when the planner misses in at least 2.5% of resamples.

    Returns ratio, lo, hi; target with its interval (target_lo, target_hi); tokens_base and
    tokens_planner (point estimates, inf if never reached); reach_frac_base and reach_frac_planner (the
    fraction of resamples in which each side's mean curve reaches the target)."""
    n = len(base_runs)
    if n == 0 or n != len(planner_runs):
        raise ValueError("tokens_to_target_ratio needs the same seeds, at least one, for both sides")
    base = [clip_curve(*smooth_curve(r, k), budget) for r in base_runs]
    plan = [clip_curve(*smooth_curve(r, k), budget) for r in planner_runs]
    # Every curve's corners: the mean of any subset of curves is linear between consecutive grid points,
    # so crossings read on this grid are exact.
    grid = np.unique(np.concatenate([t for t, _ in base + plan]))
    vb, vp = _on_grid(base, grid), _on_grid(plan, grid)
    idx = np.vstack([np.arange(n), resample_indices(n, rng, samples)])  # row 0: the sample as it is
    mb, mp = vb[idx].mean(axis=1), vp[idx].mean(axis=1)  # (1 + samples) x grid mean curves
    tgt = (mb[:, -1] if target is None else np.full(len(idx), float(target))) + target_shift
    tb, tp = first_crossing(grid, mb, tgt), first_crossing(grid, mp, tgt)
    ratios = _ratio(tb, tp)
    lo, hi = percentile_interval(ratios[1:])
    t_lo, t_hi = percentile_interval(tgt[1:])
    return {"ratio": float(ratios[0]), "lo": lo, "hi": hi,
            "target": float(tgt[0]), "target_lo": t_lo, "target_hi": t_hi,
            "tokens_base": float(tb[0]), "tokens_planner": float(tp[0]),
            "reach_frac_base": float(np.isfinite(tb[1:]).mean()),
            "reach_frac_planner": float(np.isfinite(tp[1:]).mean())}


def verdict(lo: float, hi: float, n_seeds: int, null: float = 0.0,
            min_seeds: int = MIN_SEEDS_FOR_VERDICT) -> str:
    """What an interval allows one to say. Below min_seeds no verdict at all: with 2 seeds a bootstrap
    interval is just the range of 2 values and decides nothing, however narrow it looks. From min_seeds
    on: "higher" or "lower" when the interval excludes the null value, else "no difference shown"."""
    if n_seeds < min_seeds:
        return "too few seeds"
    if lo > null:
        return "higher"
    if hi < null:
        return "lower"
    return "no difference shown"


# ---------------------------------------------------------------------------------------------------
# Bench 3.0: the preregistered test, the family-wise correction, and how many seeds they need

EXACT_MAX_SEEDS = 16  # up to here the sign-flip test enumerates all 2^k sign patterns (65,536 at 16)
MONTE_CARLO_FLIPS = 100_000  # random sign patterns above EXACT_MAX_SEEDS


def sign_patterns(k: int) -> np.ndarray:
    """All 2^k patterns of k signs, one per row (+1/-1): row j holds the bits of j."""
    return ((np.arange(2 ** k)[:, None] >> np.arange(k)) & 1) * 2.0 - 1.0


def sign_flip_p(diffs, rng: np.random.Generator | None = None, samples: int = MONTE_CARLO_FLIPS) -> float:
    """Two-sided paired sign-flip permutation test of "the mean paired difference is 0".

    Under the null each seed's difference is as likely to have either sign, so the observed |mean| is
    compared with the |mean| of every sign pattern: p = the share of patterns at least as extreme.
    Exact (all 2^k patterns) up to EXACT_MAX_SEEDS seeds; above, `samples` random patterns drawn from
    `rng` (needed then), with p = (1 + hits) / (1 + samples) so that it is never 0. The smallest p the
    exact test can give is 2 / 2^k (the observed pattern and its mirror): with k = 3 differences all
    positive, p = 2/8 = 0.25 whatever their size."""
    d = np.asarray(diffs, dtype=float)
    k = d.size
    if k == 0:
        raise ValueError("sign_flip_p needs at least one paired difference")
    obs = abs(d.sum())
    tol = 1e-12 * max(np.abs(d).sum(), 1e-300)  # patterns equal to the observed one up to rounding count
    if k <= EXACT_MAX_SEEDS:
        return float(np.mean(np.abs(sign_patterns(k) @ d) >= obs - tol))
    if rng is None:
        raise ValueError(f"sign_flip_p: more than {EXACT_MAX_SEEDS} seeds needs a generator (Monte Carlo)")
    hits = 0
    for start in range(0, samples, 10_000):  # chunks: a 100k x k sign matrix is needlessly large
        signs = rng.choice([-1.0, 1.0], size=(min(10_000, samples - start), k))
        hits += int(np.sum(np.abs(signs @ d) >= obs - tol))
    return float((1 + hits) / (1 + samples))


def holm(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values over a family of m tests (family-wise error <= alpha when an
    arm is declared different where its adjusted p <= alpha). Sorted ascending, the i-th smallest (from
    0) is multiplied by m - i, then a running maximum keeps the adjusted values in the order of the raw
    ones, capped at 1. [0.01, 0.04, 0.03] -> [0.03, 0.06, 0.06]."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj
    return out


def min_seeds_for_family(m: int, alpha: float = 0.05) -> int:
    """The fewest seeds with which the exact sign-flip test can pass Holm at alpha in a family of m:
    Holm's first step needs p <= alpha / m, and the smallest p with k seeds is 2 / 2^k, so
    k >= log2(2 m / alpha). m = 1: 6 seeds; m = 15: 10 seeds (alpha 0.05)."""
    if m < 1 or not 0 < alpha < 1:
        raise ValueError(f"min_seeds_for_family: need m >= 1 and 0 < alpha < 1, got m={m}, alpha={alpha}")
    return int(np.ceil(np.log2(2 * m / alpha) - 1e-12))


def power(effect: float, sd: float, k: int, m: int = 1, alpha: float = 0.05, sims: int = 1000,
          rng: np.random.Generator | None = None) -> float:
    """The chance that an arm whose paired differences are Normal(effect, sd) over k seeds passes Holm
    at alpha in a family of m, by simulation with the exact sign-flip test. An arm is sure to pass Holm
    only with p <= alpha / m (it may be the family's smallest p), so this is the power at that level:
    what every arm of the family can count on, whatever the others do."""
    if k > EXACT_MAX_SEEDS:
        raise ValueError(f"power: at most {EXACT_MAX_SEEDS} seeds (the exact test), got {k}")
    rng = rng if rng is not None else np.random.default_rng(0)
    d_SK = rng.normal(effect, sd, size=(sims, k))
    signs_PK = sign_patterns(k)
    passed = 0
    for start in range(0, sims, 100):  # |patterns| x 100 sums at a time (65,536 x 100 at k = 16)
        chunk = d_SK[start:start + 100]
        obs = np.abs(chunk.sum(axis=1))
        tol = 1e-12 * np.abs(chunk).sum(axis=1)
        p = np.mean(np.abs(signs_PK @ chunk.T) >= obs - tol, axis=0)
        passed += int(np.sum(p <= alpha / m))
    return passed / sims


def seeds_needed(effect: float, sd: float, m: int = 1, alpha: float = 0.05, target_power: float = 0.8,
                 max_seeds: int = EXACT_MAX_SEEDS, sims: int = 1000, seed: int = 0) -> dict:
    """Seeds for a paired test to detect `effect` at the per-seed s.d. `sd` of paired differences, at
    alpha after Holm over a family of m: the smallest k (from min_seeds_for_family on, at most
    max_seeds) whose simulated power reaches target_power. Returns {"seeds": k or None if none does,
    "min_seeds": the family's floor, "power": {k: power}}."""
    if sd < 0 or sims < 1:
        raise ValueError(f"seeds_needed: need sd >= 0 and sims >= 1, got sd={sd}, sims={sims}")
    floor = min_seeds_for_family(m, alpha)
    out = {"seeds": None, "min_seeds": floor, "power": {}}
    for k in range(floor, max_seeds + 1):
        out["power"][k] = power(effect, sd, k, m, alpha, sims, np.random.default_rng([seed, k]))
        if out["power"][k] >= target_power:
            out["seeds"] = k
            break
    return out


# ---------------------------------------------------------------------------------------------------
# Bench 3.0's goal figure: compute-to-target on raw curves


def with_x(rows: list[dict], x: list[float]) -> list[dict]:
    """The run's rows with `tokens` replaced by another cumulative cost (e.g. compute units, one value
    per row), so every curve function above reads the run on that axis."""
    if len(x) != len(rows):
        raise ValueError(f"with_x: {len(x)} values for {len(rows)} rows")
    return [{**r, "tokens": float(v)} for r, v in zip(rows, x)]


def target_se(base_runs: list[list[dict]], budget: float) -> float:
    """Standard error of the target: the s.d. over seeds of the baseline's raw accuracy at the budget,
    / sqrt(seeds) (0 with one seed)."""
    final = np.array([float(acc_at(r, budget)) for r in base_runs])
    return float(final.std(ddof=1) / np.sqrt(len(final))) if len(final) > 1 else 0.0


def compute_to_target(base_runs: list[list[dict]], arm_runs: list[list[dict]], budget: float,
                      rng: np.random.Generator, samples: int = BOOTSTRAP_SAMPLES) -> dict:
    """The goal figure: the baseline's cost to reach the target / the arm's, read at first crossings of
    the raw (unsmoothed) mean-over-seeds curves; the target is the baseline's mean accuracy at the
    budget, redrawn in every bootstrap resample (tokens_to_target_ratio with k = 1). The runs' `tokens`
    are whatever cost axis they carry (with_x: compute units). `sensitivity` holds the point ratio and
    interval with the target moved by -1 and +1 standard error (target_se)."""
    out = tokens_to_target_ratio(base_runs, arm_runs, budget, rng, samples=samples, k=1)
    se = target_se(base_runs, budget)
    out["target_se"] = se
    out["sensitivity"] = {}
    for label, shift in (("-1se", -se), ("+1se", se)):
        r = tokens_to_target_ratio(base_runs, arm_runs, budget, rng, samples=samples, k=1, target_shift=shift)
        out["sensitivity"][label] = {"ratio": r["ratio"], "lo": r["lo"], "hi": r["hi"], "target": r["target"],
                                     "tokens_base": r["tokens_base"], "tokens_planner": r["tokens_planner"]}
    return out


# ---------------------------------------------------------------------------------------------------
# Bench 4.0's time-to-target: symmetric under the null (issue 47, item 1)

SYMMETRIC_FRACTION = 0.8


def symmetric_time_to_target(base_runs: list[list[dict]], arm_runs: list[list[dict]], budget: float,
                             rng: np.random.Generator, fraction: float = SYMMETRIC_FRACTION,
                             samples: int = BOOTSTRAP_SAMPLES, reference: str = "baseline",
                             keep_draws: bool = False) -> dict:
    """Cost-to-target where neither arm sits at its edge by construction.

    compute_to_target's target is the baseline's own accuracy at the budget, so the baseline's mean curve
    crosses it at the budget (or a little before) every time, and an A/A comparison reads "not reached" one
    way round and > 1 the other (the audit of issue 47: [0.00, 1.02] against 1.28x [0.00, 1.65]). Here
    the target is `fraction` of the way from the base (both arms' mean accuracy at their first evaluation:
    every arm starts from the same checkpoint) to the reference accuracy at the budget:
      * reference "baseline" (the default, Bench 4.0's figure): the baseline's own, so the baseline
        reaches the target inside the budget and the ratio reads how much sooner the arm gets 80% of what
        tuned GRPO gains;
      * reference "pooled": both arms' mean; swapping the labels then leaves the target as it is and
        inverts the ratio exactly, but an arm that ends well above the baseline makes the baseline never
        reach it (inf).
    In each bootstrap resample seeds are drawn once for both sides and the target is recomputed from the
    drawn runs. Ratio = the baseline's cost to the target / the arm's (0 where the arm's mean curve never
    reaches it, inf where only the baseline's does not). Not defined (`defined` False, ratio nan) where the
    reference accuracy at the budget is not above the base: there is no gain to reach a fraction of.
    `keep_draws`: also return both sides' costs in every resample (`draws_base`, `draws_arm`: arrays, nan where
    the target is not defined), so that a caller reading the same seeds on two axes from the same generator
    state can pair the resamples (bench/clock.py: GPU-hours split into steps x GPU-seconds per step)."""
    n = len(base_runs)
    if n == 0 or n != len(arm_runs):
        raise ValueError("symmetric_time_to_target needs the same seeds, at least one, for both sides")
    if not 0 < fraction <= 1:
        raise ValueError(f"symmetric_time_to_target: fraction must be in (0, 1], got {fraction}")
    base = [clip_curve(*eval_curve(r), budget) for r in base_runs]
    arm = [clip_curve(*eval_curve(r), budget) for r in arm_runs]
    grid = np.unique(np.concatenate([t for t, _ in base + arm]))
    vb, va = _on_grid(base, grid), _on_grid(arm, grid)
    idx = np.vstack([np.arange(n), resample_indices(n, rng, samples)])
    mb, ma = vb[idx].mean(axis=1), va[idx].mean(axis=1)
    start = (mb[:, 0] + ma[:, 0]) / 2
    if reference not in ("baseline", "pooled"):
        raise ValueError(f"symmetric_time_to_target: reference must be 'baseline' or 'pooled', got {reference!r}")
    end = mb[:, -1] if reference == "baseline" else (mb[:, -1] + ma[:, -1]) / 2
    tgt = start + fraction * (end - start)
    defined = end > start
    tb, ta = first_crossing(grid, mb, tgt), first_crossing(grid, ma, tgt)
    ratios = np.where(defined, _ratio(tb, ta), np.nan)
    out = {"fraction": fraction, "reference": reference, "base_acc": float(start[0]), "end_acc": float(end[0]), "target": float(tgt[0]),
           "defined": bool(defined[0]), "ratio": float(ratios[0]),
           "cost_base": float(tb[0]), "cost_arm": float(ta[0]), "lo": float("nan"), "hi": float("nan"),
           "defined_frac": float(defined[1:].mean())}
    if keep_draws:
        out["draws_base"] = np.where(defined, tb, np.nan)[1:]
        out["draws_arm"] = np.where(defined, ta, np.nan)[1:]
    ok = ratios[1:][~np.isnan(ratios[1:])]  # resamples where the target is defined
    if out["defined"] and len(ok):
        out["lo"], out["hi"] = percentile_interval(ok)
    return out


def ratio_text(g: dict) -> str:
    """A symmetric time-to-target in words: 'not defined: ...' instead of nan or inf."""
    if not g.get("defined", True):
        return "not defined: tuned GRPO ended no higher than its base"

    def f(x):
        return "?" if np.isnan(x) else "not reached" if x == 0 else "∞" if np.isinf(x) else f"{x:.2f}×"
    return f"{f(g['ratio'])} [{f(g['lo'])}, {f(g['hi'])}]"


# ---------------------------------------------------------------------------------------------------
# Intervals that resample prompts as well as seeds (issue 47, item 2)


def auc_weights(t: np.ndarray, budget: float) -> np.ndarray:
    """w with area_under_curve(t, a, budget) == w @ a for any values a at the points t (the area is
    linear in the values), so a per-prompt figure is one matrix product."""
    eye = np.eye(len(t))
    return np.array([area_under_curve(np.asarray(t, float), eye[i], budget) for i in range(len(t))])


def two_way_bootstrap(D: np.ndarray, rng: np.random.Generator, samples: int = BOOTSTRAP_SAMPLES) -> dict:
    """Mean of D [seeds x prompts] (arm - baseline, per seed and held-out prompt) with a 95% interval that
    resamples seeds and prompts independently, so a verdict generalises to new prompts of the task, not
    only to new training seeds on these prompts."""
    D = np.asarray(D, float)
    if D.ndim != 2 or 0 in D.shape:
        raise ValueError("two_way_bootstrap needs a seeds x prompts matrix")
    S, P = D.shape
    means = np.empty(samples)
    for b in range(samples):
        means[b] = D[np.ix_(rng.integers(0, S, S), rng.integers(0, P, P))].mean()
    lo, hi = percentile_interval(means)
    return {"diff": float(D.mean()), "lo": lo, "hi": hi, "seeds": S, "prompts": P}
