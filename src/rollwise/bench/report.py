"""Bench analysis: each planner's held-out accuracy-vs-tokens curve against GRPO's (`uniform`), paired by
seed, with bootstrap intervals over seeds (the statistics are in stats.py). Writes summary.json,
report.md, report.html and PNG plots.

Figures per planner, all read at the exact budget (runs overshoot it by up to a step):
- headline: mean held-out accuracy over the budget (area under the curve / budget), planner - GRPO;
  verdicts use it;
- accuracy differences at 25/50/75/100% of the budget;
- tokens-to-target as a ratio against GRPO, the target being GRPO's mean final accuracy, uncertain too;
- waste and cost: tokens per useful group, zero-variance fraction, mean |advantage|, wall time, tokens
  by purpose.
"""
from __future__ import annotations

import html
import json
import re
import zlib
from pathlib import Path

import numpy as np

from ..run.records import rows as metrics_rows
from . import stats
from .runner import BenchConfig, run_dir, seed_list

BASELINE = "uniform"
PCT = [f"{f * 100:.0f}" for f in stats.FRACTIONS]  # summary keys of acc_diff: "25", "50", "75", "100"


def load_run(d: Path) -> list[dict]:
    return metrics_rows(d)


def run_figures(rows: list[dict], target: float, budget: float | None = None) -> dict:
    """One run's figures. Accuracy figures are read at `budget` (interpolated in tokens; without a budget,
    at the run's last evaluation); tokens-to-target is where its smoothed curve reaches `target`."""
    steps = [r for r in rows if r["step"] > 0]
    last = steps[-1] if steps else {}
    t, _ = stats.eval_curve(rows)
    budget = float(budget if budget is not None else t[-1])
    useful = sum(r.get("batch_groups", 0) * (1 - r.get("zero_var_frac", 0)) for r in steps)
    return {
        "tokens_to_target": stats.tokens_to_target(rows, target, budget) if budget > 0 else float("inf"),
        "auc": stats.auc(rows, budget) if budget > 0 else float("nan"),
        "acc_at": stats.acc_at_fractions(rows, budget).tolist(),
        "final_acc": float(stats.acc_at(rows, budget)),
        "covers_budget": stats.covers_budget(rows, budget),
        "base_acc": float(stats.acc_at(rows, 0)),
        "tokens": last.get("tokens", 0),
        "wall_s": last.get("wall_s", float("nan")),
        "steps": last.get("step", 0),
        "tokens_per_useful_group": last.get("tokens", 0) / useful if useful else float("inf"),
        "zero_var_frac_gen": float(np.mean([r.get("zero_var_frac_gen", 0) for r in steps])) if steps else float("nan"),
        "zero_var_frac_batch": float(np.mean([r.get("zero_var_frac", 0) for r in steps])) if steps else float("nan"),
        "mean_abs_adv": float(np.mean([r.get("mean_abs_adv", 0) for r in steps])) if steps else float("nan"),
        "tokens_by_purpose": {k[7:]: v for k, v in last.items() if k.startswith("tokens_") and k != "tokens_"},
    }


def median(x) -> float:
    """Lower median (kept for benchmarks/sim_rank.py, which ranks planners by per-seed crossings)."""
    return float(np.quantile(np.asarray(x, dtype=float), 0.5, method="lower"))


def median_ratio(base, other) -> float:
    """The old headline, kept for benchmarks/sim_rank.py: GRPO's median per-seed tokens-to-target / the
    planner's; 0 when the planner's median run never reaches the target, inf when GRPO's does not."""
    mb, mo = median(base), median(other)
    if np.isinf(mo):
        return 0.0
    return float(mb / mo) if np.isfinite(mb) and mo > 0 else float("inf")


def seed_range(cfg: BenchConfig) -> str:
    """' (seeds 100–102)' for a bench that does not start at seed 0, else ''."""
    return f" (seeds {cfg.seed_start}–{cfg.seed_start + cfg.seeds - 1})" if cfg.seed_start else ""


def load_runs(cfg: BenchConfig, mix: str) -> dict[str, list[list[dict]]]:
    """Every planner's runs of a mix, one list of rows per seed ([] where the run is missing)."""
    return {p: [load_run(run_dir(cfg, mix, p, s)) for s in seed_list(cfg)] for p in cfg.planners}


def summarize(cfg: BenchConfig, target: float | None = None, seed: int = 0) -> dict:
    out: dict = {"budget_tokens": cfg.budget_tokens, "seeds": cfg.seeds, "seed_start": cfg.seed_start,
                 "pool_size": cfg.pool_size,
                 "eval_size": cfg.eval_size, "engine": cfg.engine, "headline": "auc_diff",
                 "smoother": f"running mean over {stats.SMOOTH_EVALS} evals",
                 "min_seeds_for_verdict": stats.MIN_SEEDS_FOR_VERDICT, "mixes": {}}
    budget = float(cfg.budget_tokens)
    for mix in cfg.mixes:
        runs = load_runs(cfg, mix)
        if BASELINE not in runs:
            raise ValueError(f"the bench needs the {BASELINE!r} planner (GRPO) as its baseline")
        base_runs = [r for r in runs[BASELINE] if r]
        if not base_runs:
            raise ValueError(f"no finished {BASELINE!r} (GRPO) run in mix {mix!r}")
        # The point target: GRPO's mean smoothed accuracy at the budget (the bootstrap redraws it).
        tgt = target if target is not None else float(np.mean(
            [np.interp(budget, *stats.smooth_curve(r)) for r in base_runs]))
        mix_out = {"target_acc": tgt, "target_fixed": target is not None, "planners": {}}
        base_wall = np.median([run_figures(r, tgt, budget)["wall_s"] for r in base_runs])
        for p, rs in runs.items():
            figs = [run_figures(r, tgt, budget) for r in rs if r]
            if not figs:
                continue
            paired = [i for i in range(cfg.seeds) if rs[i] and runs[BASELINE][i]]  # positions in seed_list
            if not paired:
                continue
            # One generator per planner, so a planner's intervals do not depend on which others ran.
            rng = np.random.default_rng([seed, zlib.crc32(p.encode())])
            pb, pp = [runs[BASELINE][s] for s in paired], [rs[s] for s in paired]
            auc_diff = stats.paired_difference([stats.auc(r, budget) for r in pb],
                                               [stats.auc(r, budget) for r in pp], rng)
            acc_b = np.array([stats.acc_at_fractions(r, budget) for r in pb])
            acc_p = np.array([stats.acc_at_fractions(r, budget) for r in pp])
            acc_diff = {k: stats.paired_difference(acc_b[:, i], acc_p[:, i], rng) for i, k in enumerate(PCT)}
            ttt = stats.tokens_to_target_ratio(pb, pp, budget, rng, target=target)
            if p == BASELINE:
                mix_out["target_ci"] = [ttt["target_lo"], ttt["target_hi"]]
            ttt_runs = np.array([f["tokens_to_target"] for f in figs])
            mix_out["planners"][p] = {
                "auc": float(np.mean([f["auc"] for f in figs])),
                "auc_diff": auc_diff,
                "verdict": "baseline" if p == BASELINE else stats.verdict(auc_diff["lo"], auc_diff["hi"], len(paired)),
                "acc_at": {k: float(np.mean([f["acc_at"][i] for f in figs])) for i, k in enumerate(PCT)},
                "acc_diff": acc_diff,
                "ratio": ttt["ratio"], "ci_low": ttt["lo"], "ci_high": ttt["hi"],
                "tokens_to_target": ttt["tokens_planner"], "tokens_to_target_base": ttt["tokens_base"],
                "reach_frac": ttt["reach_frac_planner"], "reach_frac_base": ttt["reach_frac_base"],
                "reached": int(np.isfinite(ttt_runs).sum()), "runs": len(figs), "seeds_paired": len(paired),
                "held_runs": sum(not f["covers_budget"] for f in figs),
                "final_acc": float(np.mean([f["final_acc"] for f in figs])),
                "final_acc_sd": float(np.std([f["final_acc"] for f in figs])),
                "base_acc": float(np.mean([f["base_acc"] for f in figs])),
                "tokens_per_useful_group": float(np.median([f["tokens_per_useful_group"] for f in figs])),
                "wall_s": float(np.median([f["wall_s"] for f in figs])),
                "wall_ratio": float(base_wall / np.median([f["wall_s"] for f in figs])),
                "zero_var_frac_gen": float(np.mean([f["zero_var_frac_gen"] for f in figs])),
                "zero_var_frac_batch": float(np.mean([f["zero_var_frac_batch"] for f in figs])),
                "mean_abs_adv": float(np.mean([f["mean_abs_adv"] for f in figs])),
                "tokens_by_purpose": {k: float(np.mean([f["tokens_by_purpose"].get(k, 0) for f in figs]))
                                      for k in figs[0]["tokens_by_purpose"]},
            }
        out["mixes"][mix] = mix_out
    return out


# ---------------------------------------------------------------------------------------------------
# Tables (markdown; the README's tables come from markdown_table via benchmarks/update_readme.py)


def _signed(x: float) -> str:
    return f"{x:+.3f}"  # a tiny negative shows as -0.000: an interval's end just below 0 explains its verdict


def _fmt_diff(d: dict | None) -> str:
    return "—" if d is None else f"{_signed(d['diff'])} [{_signed(d['lo'])}, {_signed(d['hi'])}]"


def _fmt_x(x: float) -> str:
    return "inf" if np.isinf(x) else "0" if x == 0 else f"{x:.2f}"


NOT_DEFINED = "not defined: {who} ended {where} its base"  # a target met at 0 tokens: no ratio to read


def not_defined(who: str, end: float, base: float) -> str:
    """The time-to-target cell where the baseline's own accuracy at the budget (the target) is at or below its
    base: every curve starts at the target, so the ratio is 0/0 (it used to print "inf [inf, inf]")."""
    return NOT_DEFINED.format(who=who, where="below" if end < base else "at")


def _undefined(m: dict) -> bool:
    """GRPO's mean curve starts at or above the target (the summary's GRPO tokens-to-target is 0; older summaries:
    the target is at or below GRPO's base accuracy)."""
    g = m["planners"].get(BASELINE, {})
    if "tokens_to_target_base" in g:
        return g["tokens_to_target_base"] == 0
    return "base_acc" in g and m["target_acc"] <= g["base_acc"]


def _fmt_ratio(d: dict, p: str = "", m: dict | None = None) -> str:
    if p == BASELINE:
        return "1.00 (by definition)"  # GRPO against itself; the target is its own accuracy at the budget
    if m is not None and _undefined(m):
        return not_defined("GRPO", m["target_acc"], m["planners"][BASELINE]["base_acc"])
    if d["ratio"] == 0 and d["ci_high"] == 0:
        return "not reached"
    point = "not reached" if d["ratio"] == 0 else f"{d['ratio']:.2f}"
    return f"{point} [{_fmt_x(d['ci_low'])}, {_fmt_x(d['ci_high'])}]"


def _fmt_reach(d: dict, p: str = "") -> str:
    if p == BASELINE:  # GRPO's mean curve reaches its own accuracy at the budget by construction
        return f"by definition ({d['reached']}/{d['runs']} single runs)"
    frac = f"{d['reach_frac']:.0%}" if "reach_frac" in d else "—"  # summaries written before these figures
    return f"{frac} ({d['reached']}/{d['runs']} runs)"


def _order(planners: dict) -> list[tuple[str, dict]]:
    """Best mean accuracy over the budget first (older summaries: best ratio first)."""
    key = (lambda kv: -kv[1]["auc_diff"]["diff"]) if all("auc_diff" in d for d in planners.values()) \
        else (lambda kv: -kv[1]["ratio"])
    return sorted(planners.items(), key=key)


def target_sentence(summary: dict, mix: str) -> str:
    m = summary["mixes"][mix]
    if m.get("target_fixed"):
        return f"Target held-out accuracy {m['target_acc']:.3f} (given)."
    if "target_ci" not in m:  # a summary written before the target had an interval
        return f"Target held-out accuracy {m['target_acc']:.3f}."
    ci = f" [{m['target_ci'][0]:.3f}, {m['target_ci'][1]:.3f}]"
    return (f"Target held-out accuracy {m['target_acc']:.3f}{ci}: GRPO's mean final accuracy at the budget, "
            f"from smoothed curves, redrawn in every bootstrap resample.")


def seeds_sentence(summary: dict) -> str:
    n = summary["seeds"]
    if n < stats.MIN_SEEDS_FOR_VERDICT:
        return (f"**{n} seed{'s' if n != 1 else ''} decide nothing.** The intervals below are printed, but with "
                f"fewer than {stats.MIN_SEEDS_FOR_VERDICT} seeds a bootstrap interval is little more than the "
                f"range of the runs, so no verdict is stated.")
    return (f"Intervals: 95% bootstrap over {n} seeds, paired by seed. With this few seeds they are somewhat "
            f"too narrow, and with many planners about 1 in 20 excludes 0 by chance alone.")


def markdown_table(summary: dict, mix: str) -> str:
    m = summary["mixes"][mix]
    lines = [f"Headline: mean held-out accuracy over the budget, planner − GRPO on the same seed (verdicts "
             f"use it). {target_sentence(summary, mix)} {seeds_sentence(summary)}", "",
             "| planner | mean acc over budget | Δ vs GRPO [95% CI] | verdict | Δ acc at budget [95% CI] | "
             "tokens-to-target ratio [95% CI] | reaches target | acc at budget | tokens / useful group | "
             "zero-var frac (gen) | mean \\|A\\| | wall ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p, d in _order(m["planners"]):
        auc = f"{d['auc']:.3f}" if "auc" in d else "—"
        lines.append(f"| {p} | {auc} | {_fmt_diff(d.get('auc_diff'))} | {d.get('verdict', '—')} | "
                     f"{_fmt_diff(d.get('acc_diff', {}).get('100'))} | {_fmt_ratio(d, p, m)} | {_fmt_reach(d, p)} | "
                     f"{d['final_acc']:.3f} ± {d['final_acc_sd']:.3f} | {d['tokens_per_useful_group']:.0f} | "
                     f"{d['zero_var_frac_gen']:.2f} | {d['mean_abs_adv']:.3f} | {d['wall_ratio']:.2f} |")
    return "\n".join(lines)


LEGEND = """How to read the tables:
- **mean acc over budget**: held-out accuracy averaged over the budget, i.e. the area under the accuracy-vs-tokens curve (evals joined by straight lines, from the base model at 0 tokens to the exact budget) divided by the budget. It uses every evaluation, so it is the least noisy figure of learning speed.
- **Δ vs GRPO**: that figure minus GRPO's on the same seed, averaged over seeds; [95% CI] is a bootstrap interval over seeds (seeds resampled, each bringing both its runs). **verdict**: *higher* or *lower* when the interval excludes 0, *no difference shown* otherwise; none below {min_seeds} seeds.
- **Δ acc at budget**: the same for accuracy at the exact budget (one noisy eval per run, so wider).
- **tokens-to-target ratio**: GRPO's tokens to reach the target / the planner's (> 1: the planner needs fewer). Each side's tokens are where the mean of its seeds' smoothed curves (running mean over {k} evals) first reaches the target; the target is recomputed in every resample. *not reached*: the planner's mean curve stays below the target within the budget; an interval's lower end is 0 when that happens in more than 2.5% of resamples.
- **reaches target**: the share of resamples in which the planner's mean curve reaches the target, and how many single runs do.
- **acc at budget**: mean over seeds; **±** is the standard deviation over seeds (the spread of runs), not an interval.
- **tokens / useful group**: generated tokens per trained group whose rewards are not all equal (median over seeds). **zero-var frac (gen)**: share of generated groups whose rewards are all equal. **mean |A|**: mean absolute advantage of trained rows. **wall ratio**: GRPO's median wall time / the planner's (load on the machine varies; not reliable)."""


def legend() -> str:
    return LEGEND.format(min_seeds=stats.MIN_SEEDS_FOR_VERDICT, k=stats.SMOOTH_EVALS)


def fractions_table(summary: dict, mix: str) -> str:
    """Accuracy difference against GRPO along the budget: where a planner gains or loses ground."""
    m = summary["mixes"][mix]["planners"]
    lines = ["Held-out accuracy, planner − GRPO on the same seed, at fractions of the budget [95% CI]:", "",
             "| planner | " + " | ".join(f"{k}%" for k in PCT) + " |", "|---" * (len(PCT) + 1) + "|"]
    for p, d in _order(m):
        lines.append(f"| {p} | " + " | ".join(_fmt_diff(d["acc_diff"][k]) for k in PCT) + " |")
    return "\n".join(lines)


def purpose_table(summary: dict, mix: str) -> str:
    """Generated tokens by purpose, mean per run: where each planner's budget went (oracle: off-budget)."""
    m = summary["mixes"][mix]["planners"]
    purposes = [k for k in ("train", "pilot", "discarded", "profile", "oracle")
                if any(d["tokens_by_purpose"].get(k, 0) for d in m.values())]
    lines = ["Generated tokens by purpose (mean per run; `oracle` is off-budget, eval excluded):", "",
             "| planner | " + " | ".join(purposes) + " |", "|---" * (len(purposes) + 1) + "|"]
    for p, d in _order(m):
        lines.append(f"| {p} | " + " | ".join(f"{d['tokens_by_purpose'].get(k, 0):,.0f}" for k in purposes) + " |")
    return "\n".join(lines)


def findings(summary: dict, mix: str) -> str:
    """One sentence per verdict, from the headline figure."""
    m = summary["mixes"][mix]["planners"]
    by = {v: [p for p, d in _order(m) if d["verdict"] == v] for v in ("higher", "lower", "no difference shown")}
    if summary["seeds"] < stats.MIN_SEEDS_FOR_VERDICT:
        return f"**Verdicts:** none, {summary['seeds']} seeds decide nothing."
    return ("**Verdicts** (mean accuracy over the budget against GRPO's). Higher, interval above 0: "
            + (", ".join(by["higher"]) or "none") + ". Lower, interval below 0: " + (", ".join(by["lower"]) or "none")
            + ". No difference shown: " + (", ".join(by["no difference shown"]) or "none") + ".")


# ---------------------------------------------------------------------------------------------------
# Plots


COLOURS = {"higher": "green", "lower": "red"}  # any other verdict is drawn blue (tab:blue)


def colour_words(verdicts: list[str], seeds: int, what: str = "its mean accuracy over the budget") -> str:
    """The caption's words for the colours a plot actually used: green/red only where a verdict drew them, and
    what blue means here (too few seeds, or no difference shown)."""
    used = set(verdicts)
    words = []
    if "higher" in used:
        words.append(f"green: {what} is above GRPO's (the interval excludes 0)")
    if "lower" in used:
        words.append(f"red: {what} is below GRPO's (the interval excludes 0)")
    blue = used - set(COLOURS)
    if blue:
        why = (f"no verdict, {seeds} seed{'s decide' if seeds != 1 else ' decides'} nothing" if "too few seeds" in blue
               else "no difference shown")
        words.append(("blue" if words else "every planner in blue") + f": {why}")
    return "; ".join(words) or "no planner besides GRPO"


def _mean_band(rs: list[list[dict]], grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max over runs of their interpolated accuracy curves on the grid."""
    c = np.array([stats.acc_at(r, grid) for r in rs])
    return c.mean(axis=0), c.min(axis=0), c.max(axis=0)


def plots(cfg: BenchConfig, out: Path, summary: dict) -> dict[str, list[tuple[str, str]]]:
    """Per mix: accuracy curves (one panel per planner, against GRPO), the differences with intervals,
    and the waste. Returns each mix's (file name, caption) pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budget = float(cfg.budget_tokens)
    grid = np.linspace(0, budget, 201)
    names: dict[str, list[tuple[str, str]]] = {}
    for mix in cfg.mixes:
        names[mix] = []
        runs = {p: [r for r in rs if r] for p, rs in load_runs(cfg, mix).items()}
        m = summary["mixes"][mix]
        order = [p for p, _ in _order(m["planners"])]
        others = [p for p in order if p != BASELINE]

        # 1. accuracy vs tokens, small multiples: each planner against GRPO, same axes everywhere
        ncol = min(4, max(1, len(others)))
        nrow = max(1, -(-len(others) // ncol))
        fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.1 * nrow), sharex=True, sharey=True,
                                 squeeze=False)
        gm, glo, ghi = _mean_band(runs[BASELINE], grid)
        lo_y = min(min(_mean_band(runs[p], grid)[1].min() for p in order), m["target_acc"]) - 0.005
        hi_y = max(max(_mean_band(runs[p], grid)[2].max() for p in order), m["target_acc"]) + 0.005
        for ax, p in zip(axes.flat, others):
            d = m["planners"][p]
            pm, plo, phi = _mean_band(runs[p], grid)
            ax.fill_between(grid / 1e3, glo, ghi, color="0.6", alpha=0.25, lw=0)
            ax.plot(grid / 1e3, gm, color="0.35", lw=1.5, label="GRPO")
            color = {"higher": "tab:green", "lower": "tab:red"}.get(d["verdict"], "tab:blue")
            ax.fill_between(grid / 1e3, plo, phi, color=color, alpha=0.2, lw=0)
            ax.plot(grid / 1e3, pm, color=color, lw=1.8, label=p)
            ax.axhline(m["target_acc"], color="black", ls="--", lw=0.8)
            ax.set_title(f"{p}: Δ {_fmt_diff(d['auc_diff'])}", fontsize=9)
            ax.set_ylim(lo_y, hi_y)
            ax.grid(alpha=0.3)
        for ax in axes.flat[len(others):]:
            ax.axis("off")
        for col in range(ncol):  # x labels under the lowest panel of each column
            ax = axes[(len(others) - 1 - col) // ncol, col] if col < len(others) else axes[0, col]
            ax.set_xlabel("generated tokens (thousands)")
            ax.xaxis.set_tick_params(labelbottom=True)
        for ax in axes[:, 0]:
            ax.set_ylabel("held-out accuracy")
        fig.suptitle(f"Held-out accuracy vs tokens, mix {mix}: mean over {cfg.seeds} seeds (line), min–max of "
                     f"seeds (band); GRPO in grey; dashed: target {m['target_acc']:.3f}", fontsize=11)
        fig.tight_layout(rect=(0, 0, 1, 0.97))
        name = f"plot_{mix}.png"
        fig.savefig(out / name, dpi=80)
        plt.close(fig)
        names[mix].append((name, f"Accuracy vs generated tokens, mix `{mix}`: each planner against GRPO (grey); "
                            f"{colour_words([m['planners'][p]['verdict'] for p in others], cfg.seeds)}. "
                            f"Lines are means over seeds, bands the min–max of seeds; dashed line: the target. "
                            f"Panel titles: Δ mean accuracy over the budget [95% CI]."))

        # 2. the differences with their intervals (forest plot)
        fig, axes = plt.subplots(1, 2, figsize=(13, 0.32 * len(order) + 1.6), sharey=True)
        y = np.arange(len(order))[::-1]
        paired = load_runs(cfg, mix)  # by seed, [] where missing: each seed's own difference is plotted too
        per_seed = {
            "auc": lambda r: stats.auc(r, budget), "100": lambda r: float(stats.acc_at(r, budget))}
        diff_said = []  # the verdict each bar's colour shows, for the caption
        for ax, key, fig_key, title in (
                (axes[0], lambda d: d["auc_diff"], "auc", "Δ mean accuracy over the budget (headline)"),
                (axes[1], lambda d: d["acc_diff"]["100"], "100", "Δ accuracy at the budget")):
            for yi, p in zip(y, order):
                d = m["planners"][p]
                v = key(d)
                # coloured by this panel's own interval, not by the headline's verdict
                said = "baseline" if p == BASELINE else stats.verdict(v["lo"], v["hi"], d["seeds_paired"])
                if p != BASELINE:
                    diff_said.append(said)
                color = {"higher": "tab:green", "lower": "tab:red", "baseline": "0.5"}.get(said, "tab:blue")
                diffs = [per_seed[fig_key](a) - per_seed[fig_key](b)
                         for a, b in zip(paired[p], paired[BASELINE]) if a and b]
                ax.plot(diffs, yi + np.linspace(-0.2, 0.2, len(diffs)), ".", color=color, alpha=0.45, ms=4)
                ax.plot([v["lo"], v["hi"]], [yi, yi], color=color, lw=2.5, solid_capstyle="butt")
                ax.plot(v["diff"], yi, "o", color=color, ms=5)
            ax.axvline(0, color="black", lw=0.8)
            ax.set_title(title + " vs GRPO, 95% CI", fontsize=10)
            ax.set_xlabel("planner − GRPO (held-out accuracy)")
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks(y, order)
        fig.tight_layout()
        name = f"plot_{mix}_diff.png"
        fig.savefig(out / name, dpi=80)
        plt.close(fig)
        names[mix].append((name, f"Differences against GRPO on the same seed, mix `{mix}`: small dots = each seed's own "
                            f"difference, large dot = mean over seeds, bar = 95% bootstrap interval over seeds; "
                            f"GRPO in grey; {colour_words(diff_said, cfg.seeds, 'its interval')}."))

        # 3. waste: zero-variance share and tokens per useful group, with the seeds' range
        fig, axes = plt.subplots(1, 2, figsize=(13, 0.32 * len(order) + 1.6), sharey=True)
        for ax, key, title in ((axes[0], "zero_var_frac_gen", "zero-variance share of generated groups"),
                               (axes[1], "tokens_per_useful_group", "generated tokens per useful group")):
            vals = [[run_figures(r, m["target_acc"], budget)[key] for r in runs[p]] for p in order]
            means = [np.mean(v) for v in vals]
            err = np.array([[mu - min(v), max(v) - mu] for mu, v in zip(means, vals)]).T
            ax.barh(y, means, xerr=err, color=["0.5" if p == BASELINE else "tab:blue" for p in order],
                    alpha=0.8, error_kw={"lw": 1, "capsize": 2})
            ax.axvline(means[order.index(BASELINE)], color="black", ls="--", lw=0.8)
            ax.set_title(f"{title} (mean, whiskers: min–max of seeds)", fontsize=10)
            ax.grid(axis="x", alpha=0.3)
        axes[0].set_yticks(y, order)
        fig.tight_layout()
        name = f"plot_{mix}_waste.png"
        fig.savefig(out / name, dpi=80)
        plt.close(fig)
        names[mix].append((name, f"Waste, mix `{mix}`: the share of generated groups whose rewards are all equal "
                            f"(they teach nothing), and generated tokens per group that does teach; dashed: GRPO."))
    return names


# ---------------------------------------------------------------------------------------------------
# The report


def bench_task_options(cfg: BenchConfig) -> dict:
    """The task options every run of the bench had: the bench's own and those its `--set` gave."""
    extra = cfg.extra.get("task_options")
    return {**cfg.task_options, **(extra if isinstance(extra, dict) else {}),
            **{k.split(".", 1)[1]: v for k, v in cfg.extra.items() if k.startswith("task_options.")}}


def task_words(task: str, options: dict) -> str:
    """'Task `reasoning-gym` (dataset: gcd)': the task and its options, for every report's header."""
    opts = ", ".join(f"{k}: {v}" for k, v in sorted(options.items()))
    return f"Task `{task}`" + (f" ({opts})" if opts else " (its default options)") + "."


def prompts_used(cfg: BenchConfig) -> list[int]:
    """The held-out prompt counts the runs evaluated (eval_outcomes.jsonl's `prompts`), distinct and sorted: a task
    with fewer held-out prompts than `eval_size` evaluates all it has. Empty for runs that predate the file."""
    from ..run.evaluate import OUTCOMES

    seen = set()
    for mix in cfg.mixes:
        for p in cfg.planners:
            for s in seed_list(cfg):
                f = run_dir(cfg, mix, p, s) / OUTCOMES
                if f.exists():
                    for line in f.read_text().splitlines()[:1]:
                        try:
                            seen.add(int(json.loads(line)["prompts"]))
                        except (ValueError, KeyError, TypeError):
                            pass
    return sorted(seen)


def _count(used: list[int], asked: int) -> str:
    if not used:
        return f"up to {asked} (asked; these runs predate the per-prompt outcomes that give the count)"
    return str(used[0]) if len(used) == 1 else f"{used[0]}–{used[-1]}"


def write_report(cfg: BenchConfig, command: str, target: float | None = None) -> dict:
    out = Path(cfg.out)
    summary = summarize(cfg, target)
    summary["command"] = command
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    pngs = plots(cfg, out, summary)
    used = prompts_used(cfg)
    held_out = (f"held-out {_count(used, cfg.eval_size)} prompts (standard error of one accuracy ≈ "
                f"{0.5 / np.sqrt(min(used or [cfg.eval_size])):.3f} at most)" if cfg.engine == "torch" else
                f"engine: the population simulator, profile `{cfg.sim_profile}` (held-out accuracy computed from the "
                f"model, no sampling noise; no learner, so no mean |advantage|; wall time is simulated seconds)")
    md = ["# rollwise bench\n", f"Command: `{command}`\n", f"{task_words(cfg.task, bench_task_options(cfg))}\n",
          f"Budget {cfg.budget_tokens:,} generated tokens per run (every purpose but eval/oracle), "
          f"{cfg.seeds} seeds{seed_range(cfg)}, pool {cfg.pool_size} prompts revisited over epochs, {held_out}. Every figure is "
          f"read at exactly the budget, interpolating between evaluations in tokens.\n"]
    first = cfg.seed_start
    skipped = sorted({p for m in cfg.mixes for p in cfg.planners for s in seed_list(cfg)
                      if (run_dir(cfg, m, p, s) / "skipped.json").exists()})
    if skipped:
        md.append("Not run by this engine: " + "; ".join(
            json.loads((run_dir(cfg, cfg.mixes[0], p, first) / "skipped.json").read_text())["reason"]
            if (run_dir(cfg, cfg.mixes[0], p, first) / "skipped.json").exists() else p for p in skipped) + "\n")
    md += [legend(), ""]
    for mix in cfg.mixes:
        m = summary["mixes"][mix]
        held = {p: d["held_runs"] for p, d in m["planners"].items() if d["held_runs"]}
        md += [f"## Mix `{mix}`\n", findings(summary, mix), "", markdown_table(summary, mix), ""]
        if held:
            md += ["Runs whose evaluations stop before the budget (their last accuracy is held to the budget): "
                   + ", ".join(f"{p} {n}" for p, n in held.items()) + ".", ""]
        md += [fractions_table(summary, mix), "", purpose_table(summary, mix), ""]
        md += [f"![{name}]({name})\n\n{caption}\n" for name, caption in pngs[mix]]
    text = "\n".join(md)
    (out / "report.md").write_text(text)
    (out / "report.html").write_text(_html(text))
    return summary


def _inline(text: str) -> str:
    """Escape for HTML, then `code`, **bold** and *italic*."""
    s = html.escape(text, quote=False)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)
    return re.sub(r"(?<![\w*])\*([^*]+)\*(?![\w*])", r"<em>\1</em>", s)


def table_cells(line: str) -> list[str]:
    """The cells of a markdown table row: split on | but not on an escaped \\|, which is a literal |."""
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def _html(md: str) -> str:
    """A tiny markdown-to-HTML for the report (headings, tables, lists, images, paragraphs)."""
    out = ["<html><head><meta charset='utf-8'><title>rollwise bench</title><style>"
           "body{font-family:sans-serif;max-width:1500px;margin:auto;padding:0 1em;line-height:1.4}"
           "td,th{border:1px solid #ccc;padding:3px 6px;font-size:12px}th{background:#f3f3f3}"
           "td{white-space:nowrap}table{border-collapse:collapse;margin:0.5em 0}"
           "code{background:#f3f3f3;padding:0 3px}img{max-width:100%}"
           "</style></head><body>"]
    block = None  # "table" or "ul" while one is open
    for line in md.splitlines():
        kind = "table" if line.startswith("|") else "ul" if line.startswith("- ") else None
        if block and kind != block:
            out.append(f"</{block}>")
            block = None
        if kind == "table":
            cells = table_cells(line)
            if set("".join(cells)) <= set("-"):
                continue
            tag = "td" if block else "th"
            if not block:
                out.append("<table>")
                block = "table"
            out.append("<tr>" + "".join(f"<{tag}>{_inline(c)}</{tag}>" for c in cells) + "</tr>")
        elif kind == "ul":
            if not block:
                out.append("<ul>")
                block = "ul"
            out.append(f"<li>{_inline(line[2:])}</li>")
        elif line.startswith("#"):
            lvl = len(line) - len(line.lstrip("#"))
            out.append(f"<h{lvl}>{_inline(line.lstrip('#').strip())}</h{lvl}>")
        elif line.startswith("!["):
            src = line[line.index("(") + 1: line.index(")")]
            out.append(f"<img src='{html.escape(src)}'>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    if block:
        out.append(f"</{block}>")
    return "\n".join(out + ["</body></html>"])
