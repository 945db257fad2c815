"""A plan's figures on the clock: wall seconds and CPU seconds to target, and the paired per-seed speed.

Compute units price no idle time, so the arms that remove idle time (one-step-off, fully async, tail
batching) are invisible in them. Every metrics row carries `wall_s` and `cpu_s`, the run's training time so
far (evaluations and checkpoints excluded; run/records.py TIMING), so the same curves can be read on
either clock. WAVE4's rule for a shared machine: arms run interleaved seed by seed with their order
rotated (bench/runner.py), the figure is the **median of paired per-seed ratios** with a bootstrap interval,
and CPU seconds stand beside wall seconds (an async arm that is faster on the wall clock by using a second
core is not cheaper: its CPU seconds say so).

Two figures per arm and clock:
  * time to target: Bench 4.0's symmetric definition (bench/stats.py `symmetric_time_to_target`, 80% of
    the baseline's gain), read on the clock instead of compute units. Its budget on the clock is the
    plan's `budget.wall_seconds` for the wall clock when it sets one, else the longest run of the two arms
    (each curve held flat past its run's end, as on the compute axis);
  * seconds per step: baseline's / arm's, per seed, median over seeds — the systems speed alone.
And the equivalence test WAVE4 sets before an arm that changes what is trained a little may be called nearly
lossless: the 95% interval of the accuracy difference at the (compute) budget inside +-0.01.
Beside them, the same target on trained steps (sample efficiency alone): a clock's ratio is roughly steps to
target x speed per step, so the table shows which of the two an arm changes.
Records from before the clock fields (no `cpu_s`) give no clock figures, and the report says so.
"""
from __future__ import annotations

import numpy as np

from . import stats

CLOCKS = ("wall_s", "cpu_s")


def on_clock(rows: list[dict], field: str) -> list[dict] | None:
    """The run's rows with `tokens` replaced by its training time on the clock (step 0 at 0); None where a
    trained row lacks the field (a record from before it)."""
    trained = [r for r in rows if r.get("step", 0) > 0]
    if not trained or any(field not in r for r in trained):
        return None
    return stats.with_x(rows, [0.0 if r.get("step", 0) == 0 else float(r[field]) for r in rows])


def seconds_per_step(rows: list[dict], field: str) -> float:
    last = max((r for r in rows if r.get("step", 0) > 0), key=lambda r: r["step"])
    return float(last[field]) / last["step"]


def median_paired_ratio(base, arm, rng: np.random.Generator, samples: int = stats.BOOTSTRAP_SAMPLES) -> dict:
    """Median over seeds of base[i] / arm[i] (> 1: the arm is faster), with a 95% bootstrap interval that
    resamples seeds. The median, not the mean: one run slowed by a neighbour on the machine moves it least."""
    r = np.asarray(base, dtype=float) / np.asarray(arm, dtype=float)
    if r.size == 0:
        raise ValueError("median_paired_ratio: no paired seeds")
    meds = np.median(r[stats.resample_indices(len(r), rng, samples)], axis=1)
    lo, hi = stats.percentile_interval(meds)
    return {"ratio": float(np.median(r)), "lo": lo, "hi": hi, "per_seed": r.tolist()}


EQUIVALENCE_MARGIN = 0.01  # WAVE4: "nearly lossless" only if the 95% interval lies inside +-0.01


def equivalence(base_rows: list[list[dict]], arm_rows: list[list[dict]], budget: float, rng: np.random.Generator,
                margin: float = EQUIVALENCE_MARGIN) -> dict:
    """The accuracy difference at the budget (arm - baseline, paired by seed, rows on the budget's axis) with
    its 95% bootstrap interval, and whether that interval lies inside +-margin: WAVE4's test before an arm
    that changes what is trained a little (one-step-off, async, tail batching) may be called nearly lossless."""
    d = stats.paired_difference([float(stats.acc_at(r, budget)) for r in base_rows],
                                [float(stats.acc_at(r, budget)) for r in arm_rows], rng)
    return {**d, "margin": margin, "equivalent": bool(-margin <= d["lo"] and d["hi"] <= margin)}


def equivalence_word(eq: dict) -> str:
    """The equivalence test in words: an interval wholly above or below the margin is a difference, not a
    failed equivalence (a selection arm that learns more is not 'lossy')."""
    if eq["equivalent"]:
        return "yes: nearly lossless"
    if eq["lo"] > eq["margin"]:
        return "no: higher"
    if eq["hi"] < -eq["margin"]:
        return "no: lower"
    return "not shown"


def steps_to_target(base_rows: list[list[dict]], arm_rows: list[list[dict]], rng: np.random.Generator) -> dict:
    """The symmetric time-to-target on trained steps: sample efficiency alone, so that a clock's ratio reads as
    (steps to target) x (seconds per step), what is learned per step times how fast a step goes."""
    b = [stats.with_x(r, [float(x.get("step", 0)) for x in r]) for r in base_rows]
    a = [stats.with_x(r, [float(x.get("step", 0)) for x in r]) for r in arm_rows]
    return stats.symmetric_time_to_target(b, a, max(float(r[-1]["tokens"]) for r in b + a), rng)


def clock_figures(base_rows: list[list[dict]], arm_rows: list[list[dict]], rng: np.random.Generator,
                  wall_budget: float = 0.0) -> dict | None:
    """{clock: {"to_target": symmetric time-to-target, "per_step": median paired ratio, "budget": seconds}}
    for the paired runs (each a list of rows with the primary metric as eval_acc), and "steps": the same
    target on trained steps; None where a run has no clock fields."""
    out = {"steps": steps_to_target(base_rows, arm_rows, rng)}
    for field in CLOCKS:
        b = [on_clock(r, field) for r in base_rows]
        a = [on_clock(r, field) for r in arm_rows]
        if any(x is None for x in b + a):
            return None
        budget = wall_budget if field == "wall_s" and wall_budget else max(
            float(r[-1]["tokens"]) for r in b + a)
        out[field] = {"budget": budget,
                      "to_target": stats.symmetric_time_to_target(b, a, budget, rng),
                      "per_step": median_paired_ratio([seconds_per_step(r, field) for r in base_rows],
                                                      [seconds_per_step(r, field) for r in arm_rows], rng)}
    return out


MODEL_PROFILE = "h100x16-llama8b-v1"  # Bench 4.0's cluster profile (assets/cluster_profiles)


def modelled(base_runs: list[dict], arm_runs: list[dict], base_rows: list[list[dict]], arm_rows: list[list[dict]],
             rng: np.random.Generator, profile_name: str = MODEL_PROFILE) -> dict | None:
    """The same curves on modelled GPU-hours at the profile's scale (systems/scale.py: every row's work scaled
    to the profile's response length, priced by the step-time model in the run's deployment mode), in both of
    WAVE4's variants: the task's shape scaled (top level) and a published long-tail shape with ranks kept
    (`longtail`, with its assumed sigma at x0.5 and x2 under `sensitivity`). `*_runs`: {rows, config} per
    seed; `*_rows`: their rows with the primary metric as eval_acc. None where a run's rows carry no length
    shape (records before 2026-12-05)."""
    from ..systems import scale
    from ..systems.profile import load_profile

    if not all(scale.has_lengths(r["rows"]) for r in base_runs + arm_runs):
        return None
    profile = load_profile(profile_name)
    factor = profile.gen_len_mean / scale.base_mean_length([r["rows"] for r in base_runs])

    first = scale.base_lengths([r["rows"] for r in base_runs], factor)  # variant 2's knots, from the baseline

    def hours(run, rows, sigma):
        lt = None if sigma is None else scale.longtail_map(first, sigma)
        return stats.with_x(rows, [s / 3600 for s in scale.gpu_seconds(
            run["rows"], profile, factor, scale.mode_of(run.get("config") or {}), lt)])

    def figures(sigma):
        b = [hours(run, rows, sigma) for run, rows in zip(base_runs, base_rows)]
        a = [hours(run, rows, sigma) for run, rows in zip(arm_runs, arm_rows)]
        budget = max(float(r[-1]["tokens"]) for r in b + a)
        return {"to_target": stats.symmetric_time_to_target(b, a, budget, rng),
                "per_step": median_paired_ratio([seconds_per_step(r, "tokens") for r in b],
                                                [seconds_per_step(r, "tokens") for r in a], rng)}
    # variant 1 first, so its figures keep their draws; then variant 2 (a published long-tail shape, ranks kept)
    # at its assumed sigma and at x0.5 and x2 of it (WAVE4: an assumption's sensitivity is reported)
    sigma = scale.LONGTAIL_SIGMA
    out = {"profile": profile.name, "factor": factor, **figures(None)}
    out["longtail"] = {"sigma": sigma, **figures(sigma),
                       "sensitivity": {f"x{k:g}": figures(sigma * k) for k in (0.5, 2.0)}}
    return out


def _point(g: dict) -> str:
    """A time-to-target ratio's point estimate alone, in ratio_text's words."""
    return stats.ratio_text(g).split(" [")[0]


def markdown_lines(arms: dict) -> list[str]:
    """The report's clock table, from each arm's `clock` entry (None: no clock fields in its records)."""
    have = {a: d["clock"] for a, d in arms.items() if d.get("clock")}

    def per_step(g):
        return f"{g['ratio']:.2f}× [{g['lo']:.2f}×, {g['hi']:.2f}×]"
    # the modelled figures need no clock fields: a report without them still shows its GPU-hours
    lines = ["", "Clock figures: not available (these runs predate `cpu_s` in the metrics rows)."] \
        if any("clock" in d for d in arms.values()) else []
    if have:
        lines = ["", "On the clock (measured on this machine; training time, evaluations and checkpoints excluded). "
                 "Time to target as above, read in seconds; speed is the baseline's seconds per step over the arm's, "
                 "median of paired seeds. Wall seconds depend on the machine's load; CPU seconds count every thread of "
                 "the run's process and of its Ray workers' processes.", "",
                 "| arm | wall-clock to target [95% CI] | CPU-seconds to target [95% CI] | steps to target [95% CI] "
                 "| wall s/step speed | CPU s/step speed | Δ accuracy at the budget [95% CI] | within ±0.01 |",
                 "|---|---|---|---|---|---|---|---|"]
        for a, c in have.items():
            eq = arms[a].get("equivalence")
            eq_text = f"{eq['diff']:+.4f} [{eq['lo']:+.4f}, {eq['hi']:+.4f}] | {equivalence_word(eq)}" if eq else "— | —"
            lines.append(f"| {a} | {stats.ratio_text(c['wall_s']['to_target'])} | "
                         f"{stats.ratio_text(c['cpu_s']['to_target'])} | {stats.ratio_text(c['steps'])} | "
                         f"{per_step(c['wall_s']['per_step'])} | {per_step(c['cpu_s']['per_step'])} | {eq_text} |")
    gh = {a: d["gpu_hours"] for a, d in arms.items() if d.get("gpu_hours")}
    if gh:
        g0 = next(iter(gh.values()))
        lines += ["", f"Modelled at scale, not measured: the same curves on GPU-hours under `{g0['profile']}` (every "
                  f"response length x{g0['factor']:.0f}, the profile's mean over the baseline's at its first step; "
                  "the step-time model in each run's deployment mode; systems/scale.py; not yet validated against "
                  "measured step times).", "",
                  "| arm | GPU-hours to target [95% CI] | GPU-seconds per step speed |", "|---|---|---|"]
        for a, g in gh.items():
            lines.append(f"| {a} | {stats.ratio_text(g['to_target'])} | {per_step(g['per_step'])} |")
        lt = {a: g["longtail"] for a, g in gh.items() if g.get("longtail")}
        if lt:
            s0 = next(iter(lt.values()))["sigma"]
            lines += ["", "Second variant: every length mapped onto a published long-tail shape by one monotone map, the "
                      "same for every arm (the baseline's first-step lengths onto a lognormal of their mean; TLT and "
                      f"RollPacker report the long tail, neither gives its parameter, so sigma = {s0:g} is an "
                      "assumption), so every row keeps its rank; beside it the point estimates at sigma x0.5 and x2.",
                      "",
                      "| arm | GPU-hours to target [95% CI] | GPU-seconds per step speed | to target at sigma x0.5 / x2 "
                      "| per step at sigma x0.5 / x2 |", "|---|---|---|---|---|"]
            for a, g in lt.items():
                sens = g["sensitivity"]
                lines.append(f"| {a} | {stats.ratio_text(g['to_target'])} | {per_step(g['per_step'])} | "
                             f"{_point(sens['x0.5']['to_target'])} / {_point(sens['x2']['to_target'])} | "
                             f"{sens['x0.5']['per_step']['ratio']:.2f}× / {sens['x2']['per_step']['ratio']:.2f}× |")
    return lines
