"""The report of a planned bench (plan.py): the verdict, the goal figure and how they were reached.

Per arm against the plan's baseline, paired by seed (the baseline's seed s with the arm's s + offset):
- **primary figure** (the verdict): the difference in mean held-out accuracy over the compute budget
  (the area under the accuracy-vs-compute-units curve / the budget), with a 95% bootstrap interval,
  the exact two-sided sign-flip p, and Holm's adjusted p over the plan's family. An arm of the family
  is "higher" or "lower" when its adjusted p <= alpha; arms outside the family are described, never
  decided.
- **goal figure**: compute-to-target (the baseline's compute to reach its own mean accuracy at the
  budget / the arm's, raw mean curves, target redrawn in every resample), with the target moved by
  ±1 s.e. and each cost ratio halved and doubled. The goal is met when an arm passes the verdict, its
  ratio is >= the plan's goal_ratio and its interval's lower end is above 1.
- beside them: the same difference over the token budget (continuity with earlier benches), rows per
  trained group, and the seeds a power calculation asks for at the s.d. seen here.
The figure plots every seed's difference next to each mean and interval.
"""
from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np

from .report import not_defined, task_words
from . import clock, costs, curvefit, stats
from .environment import environments_note
from ..run.evaluate import OUTCOMES, unpack_outcomes
from .plan import Plan, arm_config, data_split_note
from .report import _html, load_run
from .runner import run_dir


def metric_rows(rows: list[dict], metric: str) -> list[dict]:
    """The run's rows with the plan's primary metric as `eval_acc` (what stats.py reads): rows that
    measured it keep it, every other row has no evaluation."""
    out = []
    for r in rows:
        new = {k: v for k, v in r.items() if k != "eval_acc"}
        if metric in r:
            new["eval_acc"] = r[metric]
        out.append(new)
    return out


def load_arm(plan: Plan, out: Path, arm: str) -> list[dict | None]:
    """Each plan seed's run of the arm: {rows, config} or None where it has not finished."""
    cfg = arm_config(plan, arm, out)
    runs = []
    for s in plan.run_seeds(arm):
        d = run_dir(cfg, "default", plan.arms[arm].planner, s)
        if not (d / "done.json").exists():
            runs.append(None)
            continue
        config = json.loads((d / "config.json").read_text()) if (d / "config.json").exists() else None
        environment = json.loads((d / "done.json").read_text()).get("environment")
        runs.append({"rows": load_run(d), "config": config, "outcomes": load_outcomes(d), "environment": environment})
    return runs


def load_outcomes(run_dir: Path) -> dict[int, dict] | None:
    """A run's per-prompt evaluation results by step (the last line of a step holds), None if not recorded."""
    f = run_dir / OUTCOMES
    if not f.exists():
        return None
    out = {}
    for line in f.read_text().splitlines():
        rec = json.loads(line)
        out[rec.pop("step")] = unpack_outcomes(rec, rec.pop("prompts"))
    return out


def per_prompt_auc(run: dict, metric: str, key: str, x_rows: list[dict], budget: float) -> np.ndarray | None:
    """Each held-out prompt's primary figure (its area over the budget), or None where outcomes are missing."""
    # the evaluations on the budget's axis, as stats.eval_curve reads them: in order, the last of equal costs
    ev = sorted((r["tokens"], r["step"]) for r in x_rows if "eval_acc" in r)
    ev = [e for i, e in enumerate(ev) if i == len(ev) - 1 or ev[i + 1][0] != e[0]]
    oc = run.get("outcomes")
    if not oc or not ev or any(s not in oc or key not in oc[s] for _, s in ev):
        return None
    w = stats.auc_weights(np.array([t for t, _ in ev], dtype=float), budget)
    return w @ np.array([oc[s][key] for _, s in ev])


def verdict(d: dict, p_holm: float, plan: Plan, fewest: int) -> str:
    """An arm's verdict: Holm's adjusted p at the plan's alpha decides, and where the plan decides on the two-way
    interval (`decision.interval: two-way`) that interval must also exclude 0, on the same side."""
    if d["seeds_paired"] < fewest:
        # below the fewest seeds with which any arm could pass, "no difference shown" would be a verdict the
        # seeds cannot give: say none (a plan of 2 seeds said "no difference shown" beside "decide nothing")
        return f"none: {d['seeds_paired']} seeds decide nothing"
    side = "higher" if d["primary"]["diff"] > 0 else "lower"
    if plan.decide_on == "two-way":
        tw = d.get("primary_two_way")
        if not tw:
            return "none: the plan decides on the two-way interval, and these runs have no per-prompt outcomes"
        excluded = tw["lo"] > 0 if side == "higher" else tw["hi"] < 0
        return side if p_holm <= plan.alpha and excluded else "no difference shown"
    return "no difference shown" if p_holm > plan.alpha else side


def two_way(plan: Plan, base: list, arm: list, metric: str, bx: list, ax: list, budget: float, rng) -> dict | None:
    """The primary figure's paired difference with an interval over seeds and prompts (None: not recorded)."""
    key = {"greedy": "greedy", "sampled": f"sampled@{plan.samples_per_prompt()}"}.get(plan.primary)
    if key is None:
        return None
    rows = []
    for b, a, xb, xa in zip(base, arm, bx, ax):
        pb, pa = per_prompt_auc(b, metric, key, xb, budget), per_prompt_auc(a, metric, key, xa, budget)
        if pb is None or pa is None or len(pb) != len(pa):
            return None
        rows.append(pa - pb)
    return stats.two_way_bootstrap(np.array(rows), rng)


def on_compute(run: dict, metric: str, profile: costs.CostProfile) -> tuple[list[dict], list[str]]:
    """The run's primary-metric rows on the compute axis, and the counts its rows lack."""
    xs, missing = costs.compute_curve(run["rows"], profile, run["config"])
    return stats.with_x(metric_rows(run["rows"], metric), xs), missing


def on_gpu_seconds(run: dict, metric: str) -> list[dict]:
    """A GPU-second plan's run (plan.budget_gpu_seconds) on the axis its runs ended on: the modelled GPU-seconds
    every trained row recorded (`model_gpu_s`: the run's meter, systems/scale.py; step 0 at 0)."""
    xs = []
    for r in run["rows"]:
        if r.get("step", 0) > 0 and "model_gpu_s" not in r:
            raise ValueError(f"the row of step {r['step']} has no model_gpu_s: a run of a plan on GPU-seconds records "
                             "them (was it made with this plan?)")
        xs.append(float(r.get("model_gpu_s", 0.0)))
    return stats.with_x(metric_rows(run["rows"], metric), xs)


def read_budget(plan: Plan) -> float:
    """The budget a plan's figures are read at: its GPU-seconds where its runs end on them, else its compute."""
    return plan.budget_gpu_seconds or plan.budget_compute


def rows_per_group(rows: list[dict]) -> float:
    per = [r["batch_rollouts"] / r["batch_groups"] for r in rows if r.get("batch_groups") and "batch_rollouts" in r]
    return float(np.mean(per)) if per else float("nan")


def also_against(plan: Plan, runs: dict, arm: str, other: str, axis, rng) -> dict:
    """The arm against another arm than the baseline (e.g. GRPO at the group size the arm trains), paired by
    plan seed: the primary figure's difference and its uncorrected sign-flip p. Described, never decided."""
    a, b = runs[arm], runs[other]
    paired = [i for i in range(len(plan.seeds)) if a[i] is not None and b[i] is not None]
    if not paired:
        return {"seeds_paired": 0}
    budget = read_budget(plan)
    fb = np.array([stats.auc(axis(b[i]), budget) for i in paired])
    fa = np.array([stats.auc(axis(a[i]), budget) for i in paired])
    return {"seeds_paired": len(paired), "primary": stats.paired_difference(fb, fa, rng),
            "p": stats.sign_flip_p(fa - fb, rng),
            "rows_per_group": float(np.mean([rows_per_group(b[i]["rows"]) for i in paired]))}


def mean_curve(runs: list[list[dict]], budget: float, points: int = 25) -> dict:
    """The primary metric's mean over seeds, and its standard error, read (interpolated) at `points` evenly
    spaced compute values from 0 to the budget: the curve the report plots with its band."""
    x = np.linspace(0.0, budget, points)
    ys = np.array([stats.acc_at(r, x) for r in runs])
    se = ys.std(0, ddof=1) / np.sqrt(len(ys)) if len(ys) > 1 else np.zeros(points)
    return {"x": x.tolist(), "mean": ys.mean(0).tolist(), "se": se.tolist(), "seeds": len(ys)}


def summarize_plan(plan: Plan, out: Path, bootstrap_seed: int = 0, power_sims: int = 400) -> dict:
    profile = costs.load_profile(plan.profile)
    metric = plan.metric()
    runs = {a: load_arm(plan, out, a) for a in plan.arms}
    base = runs[plan.baseline]
    missing_counts: set[str] = set()

    def axis(r, prof=profile):
        if plan.budget_gpu_seconds:  # read where the runs ended: on modelled GPU-seconds
            return on_gpu_seconds(r, metric)
        rows, miss = on_compute(r, metric, prof)
        missing_counts.update(miss)
        return rows

    for a, rs in runs.items():
        for r in rs:
            if r is not None and not any(metric in x for x in r["rows"]):
                raise ValueError(f"bench plan {plan.name}: arm {a}'s runs have no {metric!r} (primary {plan.primary}); "
                                 "was the evaluation set up as the plan says?")
    summary = {"plan": plan.name, "kind": plan.kind, "task": plan.task, "task_options": dict(plan.options),
               "prompts": heldout_counts(runs), "eval_size": plan.eval_size, "data_seed": plan.data_seed,
               "data": data_split_note(plan), "baseline": plan.baseline, "primary": plan.primary, "metric": metric,
               "budget_compute": plan.budget_compute, "profile": plan.profile, "formula": costs.formula(profile),
               "profile_sources": profile.sources, "budget_tokens": plan.budget_tokens, "family": plan.family,
               "family_size": len(plan.family), "alpha": plan.alpha, "goal_ratio": plan.goal_ratio,
               "decide_on": plan.decide_on, "chosen_from": plan.chosen_from, "replication": plan.replication, "seeds": plan.seeds, "arms": {}}
    note = environments_note([r["environment"] for rs in runs.values() for r in rs if r is not None])
    if note:  # absent from records made before runs recorded their environment, so those read as before
        summary["environment"] = note
    if plan.budget_gpu_seconds:  # runs ended on modelled GPU-seconds (issue 41); absent otherwise, as before
        summary.update(budget_gpu_seconds=plan.budget_gpu_seconds, cluster=plan.cluster, length_scale=plan.length_scale,
                       evaluations=plan.evaluations)
    budget = read_budget(plan)
    for arm in plan.arms:
        if arm == plan.baseline:
            continue
        rs = runs[arm]
        paired = [i for i in range(len(plan.seeds)) if rs[i] is not None and base[i] is not None]
        if not paired:
            summary["arms"][arm] = {"seeds_paired": 0}
            continue
        rng = np.random.default_rng([bootstrap_seed, zlib.crc32(arm.encode())])
        bx = [axis(base[i]) for i in paired]
        ax = [axis(rs[i]) for i in paired]
        fb = np.array([stats.auc(r, budget) for r in bx])
        fa = np.array([stats.auc(r, budget) for r in ax])
        diffs = fa - fb
        primary = stats.paired_difference(fb, fa, rng)
        primary_two_way = two_way(plan, [base[i] for i in paired], [rs[i] for i in paired], metric, bx, ax, budget, rng)
        tb = [metric_rows(base[i]["rows"], metric) for i in paired]
        ta = [metric_rows(rs[i]["rows"], metric) for i in paired]
        token_diff = stats.paired_difference([stats.auc(r, plan.budget_tokens) for r in tb],
                                             [stats.auc(r, plan.budget_tokens) for r in ta], rng)
        goal = stats.compute_to_target(bx, ax, budget, rng)
        symmetric = stats.symmetric_time_to_target(bx, ax, budget, rng)
        cost_sens = {}
        for ratio in costs.RATIOS if not plan.budget_gpu_seconds else ():  # (compute units' prices only)
            if ratio == "decode":
                continue
            for factor in (0.5, 2.0):
                prof = profile.scaled(ratio, factor)
                r = stats.tokens_to_target_ratio([axis(base[i], prof) for i in paired],
                                                 [axis(rs[i], prof) for i in paired], budget, rng, samples=1, k=1)
                cost_sens[f"{ratio}x{factor:g}"] = r["ratio"]
        sd = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else float("nan")
        power = (stats.seeds_needed(abs(primary["diff"]), sd, len(plan.family), plan.alpha, sims=power_sims)
                 if np.isfinite(sd) and primary["diff"] != 0 else None)
        summary["arms"][arm] = {
            "planner": plan.arms[arm].planner, "seed_offset": plan.arms[arm].seed_offset,
            "in_family": arm in plan.family, "seeds_paired": len(paired),
            "paired_seeds": [[plan.seeds[i], plan.seeds[i] + plan.arms[arm].seed_offset] for i in paired],
            "diffs": diffs.tolist(), "mean_auc": float(fa.mean()), "mean_auc_base": float(fb.mean()),
            "primary": primary, "p": stats.sign_flip_p(diffs, rng), "token_budget_diff": token_diff,
            "primary_t": stats.t_interval(diffs), "primary_two_way": primary_two_way, "goal": goal, "symmetric": symmetric, "cost_sensitivity": cost_sens,
            "held_runs": sum(not stats.covers_budget(r, budget) for r in ax),
            "held_runs_base": sum(not stats.covers_budget(r, budget) for r in bx),
            "rows_per_group": float(np.mean([rows_per_group(rs[i]["rows"]) for i in paired])),
            "rows_per_group_base": float(np.mean([rows_per_group(base[i]["rows"]) for i in paired])),
            "diff_sd": sd, "power": power,
            "also": {o: also_against(plan, runs, arm, o, axis, rng) for o in plan.arms[arm].also_against},
        }
        # the same curves on the wall and CPU clocks (drawn last, so the figures above keep their draws)
        if plan.engine != "sim":  # the simulator's seconds are modelled, not read off a clock
            summary["arms"][arm]["clock"] = clock.clock_figures(tb, ta, rng, plan.budget_seconds)
            summary["arms"][arm]["equivalence"] = clock.equivalence(bx, ax, budget, rng)
            # a plan that ended its runs on GPU-seconds reads them under its own cluster and length scale
            gpu_plan = {"profile_name": plan.cluster, "factor": plan.length_scale} if plan.budget_gpu_seconds else {}
            summary["arms"][arm]["gpu_hours"] = clock.modelled([base[i] for i in paired], [rs[i] for i in paired],
                                                               tb, ta, rng, **gpu_plan)
    # Holm over the whole preregistered family: an arm without results yet counts with p = 1, so a
    # partial report is never less strict than the final one
    adjusted = stats.holm([summary["arms"][a].get("p", 1.0) for a in plan.family])
    fewest = stats.min_seeds_for_family(len(plan.family), plan.alpha)
    for a, adj in zip(plan.family, adjusted):
        d = summary["arms"][a]
        if not d.get("seeds_paired"):
            continue
        d["p_holm"] = float(adj)
        d["verdict"] = verdict(d, float(adj), plan, fewest)
        g = d["goal"]
        d["goal_met"] = bool(d["verdict"] == "higher" and g["ratio"] >= plan.goal_ratio and g["lo"] > 1)
    for a, d in summary["arms"].items():
        if d.get("seeds_paired") and a not in plan.family:
            d["verdict"] = "outside the family (described, not decided)"
    summary["curves"] = {a: mean_curve([axis(r) for r in rs if r is not None], budget)
                         for a, rs in runs.items() if any(r is not None for r in rs)}
    # the other evaluation figures the runs carry (greedy beside a sampled primary, and the reverse), at
    # the budget: a run whose greedy accuracy stays flat while its sampled one rises is sharpening
    others = [m for m in ("eval_acc", f"eval_sampled_acc@{plan.samples_per_prompt()}") if m != metric
              and (m == "eval_acc" or plan.samples_per_prompt())]
    summary["secondary"] = {
        m: {a: mean_curve([on_gpu_seconds(r, m) if plan.budget_gpu_seconds else
                           stats.with_x(metric_rows(r["rows"], m), costs.compute_curve(r["rows"], profile, r["config"])[0])
                           for r in rs if r is not None and any(m in x for x in r["rows"])], budget, points=2)
            for a, rs in runs.items() if any(r is not None and any(m in x for x in r["rows"]) for r in rs)}
        for m in others}
    # every arm's own primary figure (mean over its finished seeds, paired or not): a tuning plan picks
    # the arm with the highest
    summary["ranking"] = sorted(
        ({"arm": a, "seeds": c["seeds"], "auc": float(np.mean([stats.auc(axis(r), budget) for r in runs[a] if r is not None])),
          "final": c["mean"][-1], "final_se": c["se"][-1]} for a, c in summary["curves"].items()),
        key=lambda x: -x["auc"])
    # the sigmoid fits beside compute-to-target, from their own draws (every figure above keeps its draws)
    summary["curve_fits"] = curvefit.plan_fits(
        {a: [curvefit.run_points(axis(r), budget) if r is not None else None for r in rs] for a, rs in runs.items()},
        plan.baseline, budget, {a: np.random.default_rng([bootstrap_seed, zlib.crc32(a.encode()), zlib.crc32(b"curvefit")])
                        for a in runs})
    summary["missing_counts"] = sorted(missing_counts)
    summary["min_seeds_for_family"] = stats.min_seeds_for_family(len(plan.family), plan.alpha)
    return summary


# ---------------------------------------------------------------------------------------------------
# The page


def _d(x: dict) -> str:
    return f"{x['diff']:+.4f} [{x['lo']:+.4f}, {x['hi']:+.4f}]"


def _x(v: float) -> str:
    """A cost ratio (stats._ratio) in words where it is not a number, as the symmetric table has them: 0 is
    the arm's mean curve never reaching the target, inf the arm's starting at it (they printed 0.00, inf)."""
    return "not reached" if v == 0 else "∞" if np.isinf(v) else f"{v:.2f}"


def _shifted(s: dict) -> str:
    """The point ratio with the target moved by 1 s.e.: "not defined" where the moved target sits at or below
    the baseline's start (reached at 0 compute: 0/0), as the unmoved one reads; summaries written before the
    crossings were kept give the ratio alone."""
    return "not defined" if s.get("tokens_base") == 0 else _x(s["ratio"])


def heldout_counts(runs: dict) -> list[int]:
    """The held-out prompt counts the runs evaluated (from their per-prompt outcomes), distinct and sorted."""
    seen = set()
    for rs in runs.values():
        for r in rs:
            for rec in ((r or {}).get("outcomes") or {}).values():
                seen.update(len(v) for v in rec.values())
    return sorted(seen)


def _undefined(g: dict) -> bool:
    """The baseline's mean curve starts at or above the target (its accuracy at the budget): the target is
    met at 0 compute and the ratio is 0/0."""
    return g.get("tokens_base") == 0


def _ratio(g: dict, d: dict | None = None) -> str:
    """The point ratio; 0 is "not reached" only where the arm's mean curve never reaches the target. Where
    the baseline ended at or below its base, "not defined" (it printed "inf [inf, inf]")."""
    if _undefined(g):
        return not_defined("the baseline", g["target"], (d or {}).get("base_acc", g["target"]))
    point = "not reached" if np.isinf(g["tokens_planner"]) else _x(g["ratio"])
    return f"{point} [{_x(g['lo'])}, {_x(g['hi'])}]"


def _rpg(x: float) -> str:
    return "—" if np.isnan(x) else f"{x:.1f}"


def _prompts(summary: dict) -> str:
    used = summary.get("prompts")
    if not used:
        return (f"up to {summary.get('eval_size', '?')} held-out prompts per evaluation (asked; the runs predate "
                "the per-prompt outcomes that give the count)")
    n = str(used[0]) if len(used) == 1 else f"{used[0]}–{used[-1]}"
    return f"{n} held-out prompts per evaluation (counted from the runs)"


def markdown(summary: dict) -> str:
    kind = summary["kind"].upper()
    lines = [f"# Bench plan `{summary['plan']}` — {kind}\n",
             f"**{kind} results.** " + ("Preregistered: the plan below was committed and hashed before its runs; its "
                                        "family and decision rule are the only verdicts it makes." if summary["kind"] ==
                                        "confirmatory" else "Exploratory: chosen or tuned on the seeds reported here or "
                                        "not preregistered; a lead for a confirmatory plan, not a verdict."), "",
             f"- {task_words(summary['task'], summary.get('task_options', {}))[:-1]}, {summary['data']}; "
             f"{_prompts(summary)}.",
             f"- Baseline `{summary['baseline']}`; seeds {summary['seeds'][0]}–{summary['seeds'][-1]} "
             f"({len(summary['seeds'])}).",
             *([f"- {summary['environment']}"] if summary.get("environment") else []),
             (f"- Budget {summary['budget_compute']:,.0f} compute units under `{summary['profile']}` (figures are read "
              f"there); runs end at {summary['budget_tokens']:,} budget tokens (recorded alongside)."
              if not summary.get("budget_gpu_seconds") else
              f"- Budget **{summary['budget_gpu_seconds']:,.0f} modelled GPU-seconds** under `{summary['cluster']}` "
              f"(every response length x{summary['length_scale']:g}, fixed in the plan; the step-time model in each "
              f"run's mode, systems/scale.py; modelled, not measured): runs end at the first step that reaches it and "
              f"are evaluated at each 1/{summary['evaluations']} of it, and **every figure below is read on this axis**: "
              f"where a figure says compute (compute-to-target, the curves, the fits) read modelled GPU-seconds. "
              f"Caps: {summary['budget_compute']:,.0f} compute units under `{summary['profile']}`, "
              f"{summary['budget_tokens']:,} budget tokens."),
             f"- {summary['formula']}.",
             f"- Primary figure: Δ mean `{summary['metric']}` ({summary['primary']}) over the compute budget, arm − "
             f"baseline on the same seed; two-sided exact sign-flip test; Holm over the family of "
             f"**m = {summary['family_size']}** ({', '.join(summary['family'])}) at alpha {summary['alpha']}. With "
             f"m = {summary['family_size']} no arm can pass with fewer than {summary['min_seeds_for_family']} seeds"
             + (f" (**this plan has {len(summary['seeds'])}: no verdict is possible**)."
                if len(summary["seeds"]) < summary["min_seeds_for_family"] else ".")
             + (" A verdict also needs the two-way interval (held-out prompts resampled as well as seeds) to exclude 0 "
                "on the same side (`decision.interval: two-way`)." if summary.get("decide_on") == "two-way" else ""),
             f"- Goal: compute-to-target ≥ {summary['goal_ratio']:g}× with the interval's lower end above 1, on an arm "
             f"that passes the verdict."]
    if summary.get("chosen_from"):
        lines.append(f"- Chosen from: {summary['chosen_from']}")
    if summary.get("replication"):
        lines.append(f"- **A replication on a test split an earlier record read**: {summary['replication']}")
    if summary["missing_counts"]:
        lines.append(f"- **Compute units leave out** {', '.join(summary['missing_counts'])}: the runs' metrics rows "
                     f"do not record them, so these figures charge less work than the formula says.")
    lines += ["", "| arm | seeds | Δ primary [95% CI] | p (sign-flip) | p (Holm) | verdict | compute-to-target [95% CI] "
              "| target −1 s.e. / +1 s.e. | goal met | Δ over token budget [95% CI] | rows/group (base) |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for a, d in summary["arms"].items():
        if not d.get("seeds_paired"):
            lines.append(f"| {a} | 0 | — | — | — | no finished pairs | — | — | — | — | — |")
            continue
        g = d["goal"]
        sens = ("—" if _undefined(g) else
                f"{_shifted(g['sensitivity']['-1se'])} / {_shifted(g['sensitivity']['+1se'])}")
        lines.append(f"| {a} | {d['seeds_paired']} | {_d(d['primary'])} | {d['p']:.4f} | "
                     f"{d['p_holm']:.4f} | " if "p_holm" in d else
                     f"| {a} | {d['seeds_paired']} | {_d(d['primary'])} | {d['p']:.4f} | — | ")
        lines[-1] += (f"{d['verdict']} | {_ratio(g, d.get('symmetric'))} | {sens} | "
                      f"{'yes' if d.get('goal_met') else 'no'} | {_d(d['token_budget_diff'])} | "
                      f"{_rpg(d['rows_per_group'])} ({_rpg(d['rows_per_group_base'])}) |")
    goals = [_ratio(d["goal"], d.get("symmetric")) + _shifted(d["goal"]["sensitivity"]["-1se"])
             + _shifted(d["goal"]["sensitivity"]["+1se"]) for d in summary["arms"].values() if d.get("seeds_paired")]
    if any(w in x for x in goals for w in ("not reached", "∞", "not defined")):
        lines += ["", "Compute-to-target is the baseline's compute to the target over the arm's: **not reached** is the "
                  "arm's mean curve staying below the target within the budget (at an interval's end: in at least "
                  "2.5% of resamples), **∞** the arm's curve at the target from its start (a plan's arms start from "
                  "one base, so at an interval's end: resamples in which the baseline ended no higher than it "
                  "began), **not defined** the same at the point estimate (a target at or below the base: 0/0)."]
    small = {a: d["primary_t"] for a, d in summary["arms"].items() if d.get("primary_t")}
    if small:
        lines += ["", f"With fewer than {stats.T_INTERVAL_BELOW} seeds the percentile bootstrap above is too narrow; "
                  "the 95% t interval of the same paired differences: "
                  + "; ".join(f"{a} {_d(t)}" for a, t in small.items()) + "."]
    paired_arms = [a for a, d in summary["arms"].items() if d.get("seeds_paired")]
    tw = {a: summary["arms"][a].get("primary_two_way") for a in paired_arms}
    if paired_arms:
        lines += ["", "The primary figure with an interval that resamples held-out prompts as well as seeds (two-way "
                  "bootstrap; decides from Bench 4.0 on): " + ("; ".join(f"{a} {_d(x)}" for a, x in tw.items() if x)
                  if any(tw.values()) else "not available: these runs predate per-prompt outcomes "
                  "(eval_outcomes.jsonl), so their intervals resample seeds only") + "."]
    sym = {a: d["symmetric"] for a, d in summary["arms"].items() if d.get("symmetric")}
    if sym:
        f = next(iter(sym.values()))["fraction"]
        lines += ["", f"Time-to-target (Bench 4.0's definition): the target is {f:.0%} of the way from the base to the "
                  "baseline's accuracy at the budget, so neither arm sits at its edge by construction and an A/A "
                  "comparison reads about 1× either way round. The compute-to-target column above is the "
                  "old definition (the baseline's own accuracy at the budget), kept for one release.", "",
                  "| arm | base → baseline at the budget (target) | baseline's cost / arm's [95% CI] |", "|---|---|---|"]
        for a, g in sym.items():
            lines.append(f"| {a} | {g['base_acc']:.3f} → {g['end_acc']:.3f} ({g['target']:.3f}) | "
                         f"{stats.ratio_text(g)} |")
    lines += curvefit.markdown_lines(summary.get("curve_fits"), summary["baseline"],
                                     summary.get("budget_gpu_seconds") or summary["budget_compute"])
    lines += clock.markdown_lines(summary["arms"])
    also = [(a, o, x) for a, d in summary["arms"].items() for o, x in d.get("also", {}).items() if x.get("seeds_paired")]
    if also:
        lines += ["", "Also compared, described and not decided (uncorrected p; e.g. GRPO at the group size the arm "
                  "trains):", "", "| arm | against | seeds | Δ primary [95% CI] | p (sign-flip, uncorrected) | "
                  "rows/group (theirs) |", "|---|---|---|---|---|---|"]
        for a, o, x in also:
            lines.append(f"| {a} | {o} | {x['seeds_paired']} | {_d(x['primary'])} | {x['p']:.4f} | "
                         f"{_rpg(summary['arms'][a]['rows_per_group'])} ({_rpg(x['rows_per_group'])}) |")
    if not summary.get("budget_gpu_seconds"):  # (a GPU-second plan's figures price no compute units)
        lines += ["", "Compute-to-target with each cost ratio halved / doubled (point estimates):", "",
                  "| arm | " + " | ".join(k for k in costs.RATIOS if k != "decode") + " |",
                  "|---" * len(costs.RATIOS) + "|"]
    for a, d in summary["arms"].items():
        if d.get("seeds_paired") and not summary.get("budget_gpu_seconds"):
            cs = d["cost_sensitivity"]
            lines.append(f"| {a} | " + " | ".join("not defined" if _undefined(d["goal"]) else
                                                   f"{_x(cs[f'{k}x0.5'])} / {_x(cs[f'{k}x2'])}"
                                                   for k in costs.RATIOS if k != "decode") + " |")
    lines += ["", "Seeds a paired test needs to pass Holm here at power 0.8, for the effect and per-seed s.d. of "
              "differences seen (simulated with the exact sign-flip test):", ""]
    for a, d in summary["arms"].items():
        if d.get("power"):
            k = d["power"]["seeds"]
            lines.append(f"- {a}: effect {abs(d['primary']['diff']):.4f}, s.d. {d['diff_sd']:.4f}: "
                         + (f"{k} seeds" if k else "more than 16 seeds (not reachable with the exact test)") + ".")
    held = {a: d["held_runs"] for a, d in summary["arms"].items() if d.get("held_runs")}
    if held:
        lines += ["", "Runs whose evaluations stop before the compute budget (their last value is held): "
                  + ", ".join(f"{a} {n}" for a, n in held.items()) + "."]
    lines += ["", "Mean primary metric over the compute budget (± 1 s.e. over seeds), every arm:", "",
              "| arm | seeds | " + " | ".join(f"{f:g}" for f in (0, 0.25, 0.5, 0.75, 1)) + " of the budget |",
              "|---|---|---|---|---|---|---|"]
    for a, c in summary.get("curves", {}).items():
        idx = [round(f * (len(c["x"]) - 1)) for f in (0, 0.25, 0.5, 0.75, 1)]
        lines.append(f"| {a} | {c['seeds']} | " + " | ".join(f"{c['mean'][i]:.3f} ± {c['se'][i]:.3f}" for i in idx) + " |")
    sec = summary.get("secondary", {})
    lines += ["", "Arms ranked by their own primary figure (mean over the compute budget, over their finished seeds; "
              "a tuning plan picks the first), with the other evaluation figures at the start and at the budget:", "",
              "| rank | arm | seeds | mean over the budget | at the budget (± s.e.) | "
              + "".join(f"`{m}` start → budget | " for m in sec), "|---|---|---|---|---|" + "---|" * len(sec)]
    for i, r in enumerate(summary.get("ranking", []), 1):
        cells = "".join(f"{c['mean'][0]:.3f} → {c['mean'][-1]:.3f} ± {c['se'][-1]:.3f} | " if (c := sec[m].get(r["arm"]))
                        else "— | " for m in sec)
        lines.append(f"| {i} | {r['arm']} | {r['seeds']} | {r['auc']:.4f} | {r['final']:.3f} ± {r['final_se']:.3f} | {cells}")
    lines += ["", "![curves](plan_curves.png)", "", "![per-seed differences](plan_diffs.png)", "",
              "Each arm's per-seed differences (dots), their mean (diamond) and 95% bootstrap interval (bar), primary "
              "figure; family arms in colour."]
    return "\n".join(lines) + "\n"


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a, d in summary["arms"].items() if d.get("seeds_paired")]
    fig, ax = plt.subplots(figsize=(8, 0.6 * len(arms) + 1.5))
    for y, a in enumerate(reversed(arms)):
        d = summary["arms"][a]
        color = "tab:blue" if d["in_family"] else "0.5"
        jitter = np.linspace(-0.15, 0.15, len(d["diffs"])) if len(d["diffs"]) > 1 else [0.0]
        ax.plot(d["diffs"], y + np.asarray(jitter), "o", color=color, alpha=0.5, ms=4)
        ax.plot([d["primary"]["lo"], d["primary"]["hi"]], [y, y], color=color, lw=3, solid_capstyle="butt")
        ax.plot(d["primary"]["diff"], y, "D", color="black", ms=6)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(arms)), list(reversed(arms)))
    ax.set_xlabel(f"arm − {summary['baseline']}: mean {summary['metric']} over the compute budget")
    ax.set_title(f"{summary['plan']} ({summary['kind']}): per-seed differences, mean, 95% CI", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_curves(summary: dict, path: Path) -> None:
    """Every arm's mean primary metric over the compute budget with a band of ±1 s.e. over seeds; the
    baseline in black."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for a, c in summary["curves"].items():
        base = a == summary["baseline"]
        x, m, se = np.asarray(c["x"]), np.asarray(c["mean"]), np.asarray(c["se"])
        line, = ax.plot(x, m, color="black" if base else None, lw=2.2 if base else 1.2,
                        label=f"{a} ({c['seeds']} seeds)")
        ax.fill_between(x, m - se, m + se, color=line.get_color(), alpha=0.15 if base else 0.08, lw=0)
    ax.set_xlabel(axis_label(summary))
    ax.set_ylabel(f"{summary['metric']} ({summary['data']})")
    ax.set_title(f"{summary['plan']} ({summary['kind']}): mean over seeds, band ±1 s.e.", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def axis_label(summary: dict) -> str:
    """The x axis the plan's figures are read on."""
    if summary.get("budget_gpu_seconds"):
        return f"modelled GPU-seconds ({summary['cluster']}, lengths x{summary['length_scale']:g})"
    return f"compute units ({summary['profile']})"


def refuse_empty_report(plan: Plan, out: Path) -> None:
    """`--report-only` over a record none of whose runs is at hand would overwrite its report with an
    empty one: refuse, and say how to get the runs back when they are packed (benchmarks/archive.py)."""
    if any(r is not None for arm in plan.arms for r in load_arm(plan, out, arm)):
        return
    if (out / "runs.tar.xz").exists():
        raise ValueError(f"bench --plan --report-only: the runs of {out} are packed in runs.tar.xz; unpack them "
                         f"first (python benchmarks/archive.py unpack {out.name}); nothing was rewritten")
    raise ValueError(f"bench --plan --report-only: {out} holds no finished run yet; nothing was rewritten "
                     f"(`rollwise bench status {out}` says what is left)")


def write_plan_report(plan: Plan, out: Path) -> dict:
    summary = summarize_plan(plan, out)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    text = markdown(summary)
    (out / "report.md").write_text(text)
    (out / "report.html").write_text(_html(text))
    plot(summary, out / "plan_diffs.png")
    plot_curves(summary, out / "plan_curves.png")
    curvefit.plot(summary, out / "plan_fits.png")
    return summary
