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

import copy

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
# How far the step-time model is validated, as docs/systems.md's two tables say (a test holds them together)
VALIDATION = "model validated: 5 of 12 published figures within ±25%; CPU mechanics: see docs/systems.md"


def modelled(base_runs: list[dict], arm_runs: list[dict], base_rows: list[list[dict]], arm_rows: list[list[dict]],
             rng: np.random.Generator, profile_name: str = MODEL_PROFILE, factor: float | None = None) -> dict | None:
    """The same curves on modelled GPU-hours at the profile's scale (systems/scale.py: every row's work scaled
    to the profile's response length, priced by the step-time model in the run's deployment mode), in both of
    WAVE4's variants: the task's shape scaled (top level) and a published long-tail shape (`longtail`, with its
    assumed sigma at x0.5 and x2 under `sensitivity`); and `split`, variant 1's GPU-hours to target as steps to
    target (measured) x GPU-seconds per step up to the target (modelled), which multiply out (`split_of`).
    `*_runs`: {rows, config} per seed; `*_rows`: their rows with the primary metric as eval_acc.
    `lengths` says where the lengths came from: "shape" (rows from 2026-12-05 on carry one), or, when any
    run's rows carry none (every Bench 3.0 record), "step mean": every run's rows filled by scale.fill_lengths,
    every row of a step at its mean (variant 1; the tail missed), and variant 2 "step lognormal" (each step a
    lognormal of its mean at the assumed sigma) in place of the baseline's map. None where rows carry neither a
    shape nor the cumulative `tokens` and `rollouts` a step's mean is read from. `factor`: a length scale fixed
    beforehand (a plan whose runs ended on GPU-seconds: its budget.length_scale) in place of the baseline's."""
    from ..systems import scale
    from ..systems.profile import load_profile

    split_rng = copy.deepcopy(rng)  # the split's draws, from the state the first figures start at (below)
    fallback = not all(scale.has_lengths(r["rows"]) for r in base_runs + arm_runs)
    if fallback and not all(scale.has_step_means(r["rows"]) for r in base_runs + arm_runs):
        return None  # not even decoded tokens and rows per step: nothing to scale
    profile = load_profile(profile_name)

    def filled(runs, sigma):  # without a shape: variant 1 each step at its mean, variant 2 a lognormal of it
        if not fallback:
            return runs
        how = "step mean" if sigma is None else "step lognormal"
        return [{**r, "rows": scale.fill_lengths(r["rows"], how, sigma or 0.0)} for r in runs]
    fixed = factor is not None
    if not fixed:
        factor = profile.gen_len_mean / scale.base_mean_length([r["rows"] for r in filled(base_runs, None)])
    first = None if fallback else scale.base_lengths([r["rows"] for r in base_runs], factor)  # variant 2's knots

    def curves(runs, rows_list, sigma):
        lt = None if sigma is None or fallback else scale.longtail_map(first, sigma)
        return [stats.with_x(rows, [s / 3600 for s in scale.gpu_seconds(
            run["rows"], profile, factor, scale.mode_of(run.get("config") or {}), lt)])
            for run, rows in zip(filled(runs, sigma), rows_list)]

    def figures(sigma):
        b, a = curves(base_runs, base_rows, sigma), curves(arm_runs, arm_rows, sigma)
        budget = max(float(r[-1]["tokens"]) for r in b + a)
        return {"to_target": stats.symmetric_time_to_target(b, a, budget, rng),
                "per_step": median_paired_ratio([seconds_per_step(r, "tokens") for r in b],
                                                [seconds_per_step(r, "tokens") for r in a], rng)}
    # variant 1 first, so its figures keep their draws; then variant 2 (a published long-tail shape, ranks kept)
    # at its assumed sigma and at x0.5 and x2 of it (WAVE4: an assumption's sensitivity is reported)
    sigma = scale.LONGTAIL_SIGMA
    out = {"profile": profile.name, "factor": factor, **({"factor_from": "plan"} if fixed else {}),
           "lengths": "step mean" if fallback else "shape", **figures(None)}
    out["longtail"] = {"sigma": sigma, "lengths": "step lognormal" if fallback else "baseline map",
                       **figures(sigma), "sensitivity": {f"x{k:g}": figures(sigma * k) for k in (0.5, 2.0)}}
    # the split, drawn last from a copy of the first state: the hours side repeats variant 1's to_target exactly
    out["split"] = split_of(base_rows, arm_rows, curves(base_runs, base_rows, None),
                            curves(arm_runs, arm_rows, None), split_rng)
    return out


def split_of(base_rows: list[list[dict]], arm_rows: list[list[dict]], base_hours: list[list[dict]],
             arm_hours: list[list[dict]], rng: np.random.Generator) -> dict:
    """GPU-hours to target split into its two factors, paired resample by resample:
        baseline's hours / arm's = (baseline's steps / arm's) x (baseline's GPU-s per step / arm's),
    steps and hours each the symmetric time-to-target of the seeds' mean curve on that axis (the same target:
    both curves reach the same accuracies), GPU-seconds per step = hours x 3600 / steps up to the target. Each
    side is read from a copy of `rng`, so every resample draws the same seeds on both axes and the per-step
    factor's interval is the ratio's in those resamples. `*_rows`: rows on any axis (the step is read);
    `*_hours`: the same rows with `tokens` in GPU-hours. {steps, hours: symmetric figures; per_step: {ratio,
    lo, hi, defined, base_s, arm_s}}; per_step is not defined where either side does not reach the target."""
    def on_steps(rows_list):
        return [stats.with_x(r, [float(x.get("step", 0)) for x in r]) for r in rows_list]
    bs, as_ = on_steps(base_rows), on_steps(arm_rows)
    steps = stats.symmetric_time_to_target(bs, as_, max(float(r[-1]["tokens"]) for r in bs + as_),
                                           copy.deepcopy(rng), keep_draws=True)
    hours = stats.symmetric_time_to_target(base_hours, arm_hours,
                                           max(float(r[-1]["tokens"]) for r in base_hours + arm_hours),
                                           copy.deepcopy(rng), keep_draws=True)

    def per_step(hb, sb, ha, sa):
        with np.errstate(divide="ignore", invalid="ignore"):
            f = (np.asarray(hb) / np.asarray(sb)) / (np.asarray(ha) / np.asarray(sa))
        return np.where(np.isfinite(f) & (f > 0), f, np.nan)
    point = float(per_step(hours["cost_base"], steps["cost_base"], hours["cost_arm"], steps["cost_arm"]))
    draws = per_step(hours.pop("draws_base"), steps.pop("draws_base"), hours.pop("draws_arm"), steps.pop("draws_arm"))
    ok = draws[~np.isnan(draws)]
    lo, hi = stats.percentile_interval(ok) if len(ok) and not np.isnan(point) else (float("nan"), float("nan"))
    sec = {side: hours[f"cost_{side}"] * 3600 / steps[f"cost_{side}"]
           if 0 < steps[f"cost_{side}"] < np.inf and hours[f"cost_{side}"] < np.inf else float("nan")
           for side in ("base", "arm")}
    return {"steps": steps, "hours": hours,
            "per_step": {"ratio": point, "lo": lo, "hi": hi, "defined": not np.isnan(point),
                         "base_s": sec["base"], "arm_s": sec["arm"]}}


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
        fallback = any(g.get("lengths") == "step mean" for g in gh.values())
        lines += ["", f"Modelled at scale, not measured: the same curves on GPU-hours under `{g0['profile']}` (every "
                  f"response length x{g0['factor']:.0f}, "
                  + ("the plan's fixed length scale; " if g0.get("factor_from") == "plan" else
                     "the profile's mean over the baseline's at its first step; ") +
                  f"the step-time model in each run's deployment mode; systems/scale.py; {VALIDATION}). "
                  "GPU-hours to target = steps to target (sample efficiency, measured) × GPU-seconds per step up "
                  "to the target (hardware efficiency, modelled), the three ratios paired resample by resample; "
                  "beside them the per-step ratio over whole runs (median of paired seeds)."]
        if fallback:
            lines += ["", "Lengths: these runs' rows carry no length shape (recorded before 2026-12-05), only each "
                      "step's decoded tokens and rows, so every row of a step is put at the step's mean length "
                      "(systems/scale.py `fill_lengths`, \"step mean\"). That misses the tail: a synchronous step "
                      "waits for its longest row, so the seconds per step are a lower bound, and an arm's effect on "
                      "the spread of lengths is seen only through its mean."]
        lines += ["", "| arm | steps to target [95% CI] | × GPU-s per step to target [95% CI] "
                  "| = GPU-hours to target [95% CI] | GPU-s per step, whole run | lengths |", "|---|---|---|---|---|---|"]
        for a, g in gh.items():
            sp = g.get("split")
            if sp:
                ps = sp["per_step"]
                ps_text = (f"{ps['ratio']:.2f}× [{ps['lo']:.2f}×, {ps['hi']:.2f}×] ({ps['base_s']:,.0f} s / "
                           f"{ps['arm_s']:,.0f} s)" if ps["defined"] else "not defined (a side does not reach the target)")
                head = f"{stats.ratio_text(sp['steps'])} | {ps_text}"
            else:  # a summary written before the split
                head = "— | —"
            lines.append(f"| {a} | {head} | {stats.ratio_text(g['to_target'])} | {per_step(g['per_step'])} | "
                         f"{g.get('lengths', 'shape')} |")
        lt = {a: g["longtail"] for a, g in gh.items() if g.get("longtail")}
        if lt:
            s0 = next(iter(lt.values()))["sigma"]
            how = ("every step's rows at a lognormal of the step's mean (the runs carry no shape to map)"
                   if fallback else "every length mapped onto a published long-tail shape by one monotone map, the "
                   "same for every arm (the baseline's first-step lengths onto a lognormal of their mean), so every "
                   "row keeps its rank")
            lines += ["", f"Second variant: {how}; TLT and RollPacker report the long tail, neither gives its "
                      f"parameter, so sigma = {s0:g} is an assumption; beside it the point estimates at sigma x0.5 "
                      "and x2.", "",
                      "| arm | GPU-hours to target [95% CI] | GPU-seconds per step speed | to target at sigma x0.5 / x2 "
                      "| per step at sigma x0.5 / x2 |", "|---|---|---|---|---|"]
            for a, g in lt.items():
                sens = g["sensitivity"]
                lines.append(f"| {a} | {stats.ratio_text(g['to_target'])} | {per_step(g['per_step'])} | "
                             f"{_point(sens['x0.5']['to_target'])} / {_point(sens['x2']['to_target'])} | "
                             f"{sens['x0.5']['per_step']['ratio']:.2f}× / {sens['x2']['per_step']['ratio']:.2f}× |")
    return lines
