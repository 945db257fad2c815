"""Each arm's compute-to-target against its task's initial zero-variance share (issue 43 item 5).

    python benchmarks/zero_var_saving.py          # benchmarks/results/zero_var_saving.{json,md,png}

Selection can at most save about 1/(1 - p0), where p0 is the share of groups whose rewards are all equal
(they teach GRPO nothing); p0 depends on the model and the data, and a user sees their own run's in its
first steps (`zero_var_frac_gen`). This puts every arm's saving on the tasks of the suite against that
share, so a user can read off what an arm saved at a share near theirs.

Sources (SOURCES): exploratory plan records on each task's validation split, seeds 0-2, against tuned
GRPO - the same protocol on every task, so the points are comparable, and none is a verdict; then the suite's
confirmatory plan (suite_confirm_*: test split of a fresh data seed, 10 seeds; its verdicts come from
`bench_holm.py --suite suite_confirm`) and the hard pool's after its reweighting (pool_l6_confirm, a family
of its own), drawn filled beside the open exploratory points. Per record,
its runs are unpacked into a temporary folder (the record is never written) and the plan report's own
summary is recomputed over them (bench/plan_report.py `summarize_plan`, as gpu_hours_records.py does), so
every figure here equals the record's report where the baseline is the plan's. Per task and arm:

  * p0: the mean `zero_var_frac_gen` over tuned GRPO's first P0_STEPS steps, over its seeds (measured);
  * compute-to-target (Bench 4.0's symmetric definition: 80% of tuned GRPO's gain; compute units, counts
    measured and priced by the plan's cost profile) with its bootstrap interval;
  * GPU-hours to target under the cluster profile (modelled; bench/clock.py) and the primary difference.

A plan that tunes GRPO beside its arms (the pools: arms named `grpo*`, planner `uniform`, no other advantage)
has its own pick, the GRPO arm with the best mean primary figure (WAVE3's rule); where that is not the
plan's baseline, the arms are read against the pick as well, from the same runs (paired by seed).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from rollwise.bench.plan import load_plan
from rollwise.bench.plan_report import load_arm, summarize_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archive import RESULTS, unpack  # noqa: E402  (benchmarks/archive.py)
from gpu_hours_records import POWER_SIMS, _ratio  # noqa: E402

DEFAULT_OUT = RESULTS / "zero_var_saving"
P0_STEPS = 3  # "what a user sees in their first steps"; the pools were confirmed on the same 3 (plans/LOG.md)


@dataclasses.dataclass(frozen=True)
class Source:
    task: str          # the label on the plot
    record: str        # a plan record under benchmarks/results
    arms: tuple        # the arms read from it
    confirmatory: bool = False  # a preregistered plan on the test split (drawn filled), else exploration


SOURCES = (
    Source("task 1", "bench3_explore27b_task1", ("ar3po", "pods-ar3po")),
    Source("task 1", "levers_explore_task1", ("reinforce-ada", "rl-zvp")),
    Source("testbed", "bench3_explore27b_remainder", ("ar3po", "pods-ar3po")),
    Source("testbed", "levers_explore_remainder", ("reinforce-ada", "rl-zvp")),
    Source("hard pool", "pool_hard_explore", ("ar3po", "pods-ar3po", "reinforce-ada", "rl-zvp")),
    Source("easy pool", "pool_easy_explore", ("ar3po", "pods-ar3po", "reinforce-ada")),
    Source("hard pool (level 6)", "pool_l6_explore", ("ar3po", "pods-ar3po", "reinforce-ada", "rl-zvp")),
    Source("task 1", "suite_confirm_task1", ("ar3po",), confirmatory=True),
    Source("testbed", "suite_confirm_remainder", ("ar3po",), confirmatory=True),
    Source("easy pool", "suite_confirm_easy", ("ar3po", "reinforce-ada"), confirmatory=True),
    Source("hard pool", "suite_confirm_hard", ("ar3po",), confirmatory=True),
    Source("hard pool (level 6)", "pool_l6_confirm", ("ar3po",), confirmatory=True),
)


def initial_share(runs: list[dict | None], steps: int = P0_STEPS) -> float:
    """Mean zero-variance share of generated groups over the first `steps` training steps of each run."""
    per_run = []
    for r in runs:
        if r is None:
            continue
        shares = [x["zero_var_frac_gen"] for x in r["rows"] if 1 <= x.get("step", 0) <= steps and "zero_var_frac_gen" in x]
        if shares:
            per_run.append(float(np.mean(shares)))
    return float(np.mean(per_run)) if per_run else float("nan")


def grpo_arms(plan) -> list[str]:
    """The plan's GRPO arms (its baseline and any tuning neighbours): uniform, GRPO's advantage."""
    return [a for a, arm in plan.arms.items() if a.startswith("grpo") and arm.planner == "uniform"
            and arm.settings.get("learner.advantage", "grpo") == "grpo"]


def pick(summary: dict, plan) -> str:
    """The GRPO arm with the best mean primary figure over the budget (WAVE3's tuning rule)."""
    means = {plan.baseline: next(iter(summary["arms"].values()))["mean_auc_base"]}
    means.update({a: summary["arms"][a]["mean_auc"] for a in grpo_arms(plan) if a in summary["arms"]})
    return max(means, key=means.get)


def arm_figures(d: dict) -> dict:
    g = d.get("gpu_hours")
    return {"seeds_paired": d["seeds_paired"], "primary": d["primary"], "mean_auc": d["mean_auc"],
            "compute_to_target": _ratio(d["symmetric"]),
            "gpu_hours_to_target": None if g is None else _ratio(g["to_target"]),
            "steps_to_target": None if g is None else _ratio(g["split"]["steps"])}


def source_figures(src: Source) -> dict:
    rec = RESULTS / src.record
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        unpack(rec, out)
        plan, _ = load_plan(rec / "plan.yaml")
        s = summarize_plan(plan, out, power_sims=POWER_SIMS)
        best = pick(s, plan)
        fig = {"task": src.task, "record": src.record, "confirmatory": src.confirmatory, "task_name": plan.task, "task_options": dict(plan.options),
               "baseline": plan.baseline, "seeds": list(plan.seeds),
               "p0": initial_share(load_arm(plan, out, plan.baseline)),
               "grpo_pick": best, "grpo_arms": {a: s["arms"][a]["mean_auc"] for a in grpo_arms(plan) if a in s["arms"]},
               "arms": {a: arm_figures(s["arms"][a]) for a in src.arms if s["arms"].get(a, {}).get("seeds_paired")}}
        if best != plan.baseline:
            s2 = summarize_plan(dataclasses.replace(plan, baseline=best), out, power_sims=POWER_SIMS)
            fig["arms_vs_pick"] = {a: arm_figures(s2["arms"][a]) for a in src.arms
                                   if s2["arms"].get(a, {}).get("seeds_paired")}
            fig["p0_pick"] = initial_share(load_arm(plan, out, best))
    return fig


def _x(g: dict | None) -> str:
    if not g or not g.get("defined", True) or g.get("ratio") is None or np.isnan(g["ratio"]):
        return "not defined"
    r = g["ratio"]
    txt = "not reached" if r == 0 else ("inf" if np.isinf(r) else f"{r:.2f}x")
    return f"{txt} [{g['lo']:.2f}, {g['hi']:.2f}]"


def _table(figs: list[dict]) -> list[str]:
    lines = ["| task | p0 | 1/(1-p0) | arm | Δ primary [95% CI] | compute-to-target | GPU-hours to target | record |",
             "|---|---|---|---|---|---|---|---|"]
    for f in figs:
        for a, d in f["arms"].items():
            p = d["primary"]
            lines.append(f"| {f['task']} | {f['p0']:.3f} | {1 / (1 - f['p0']):.2f} | {a} | "
                         f"{p['diff']:+.4f} [{p['lo']:+.4f}, {p['hi']:+.4f}] | {_x(d['compute_to_target'])} | "
                         f"{_x(d['gpu_hours_to_target'])} | {f['record']} |")
    return lines


def markdown(figs: list[dict], command: str) -> str:
    explore = [f for f in figs if not f.get("confirmatory")]
    confirm = [f for f in figs if f.get("confirmatory")]
    lines = ["# Compute-to-target against the initial zero-variance share", "",
             f"`{command}` (issue 43 item 5). p0 = tuned GRPO's mean `zero_var_frac_gen` over its first {P0_STEPS}",
             "steps in each plan's own runs (measured). Compute-to-target: the symmetric definition (80% of tuned",
             "GRPO's gain), compute units (counts measured, priced by gpu-h100-v1). GPU-hours: modelled under the",
             "cluster profile (bench/clock.py). 1/(1 - p0) is the most that dropping every zero-variance group for",
             "free could save if nothing else changed.", "",
             "## Exploration (validation split of data seed 0, seeds 0-2: no figure here is a verdict)", ""]
    lines += _table(explore)
    if confirm:
        lines += ["", "## The suite's confirmatory plan (test split of data seed 2, seeds 7000-7009)", "",
                  "The verdicts (Holm over the suite's family of five, two-way interval) are in "
                  "`suite_confirm.md` (`python benchmarks/bench_holm.py --suite suite_confirm`); the intervals "
                  "here are the seeds' alone.", ""]
        lines += _table(confirm)
    lines += ["", "Tuned GRPO per source (mean primary figure over the budget of each GRPO arm; the pick is the best):", ""]
    for f in figs:
        arms = ", ".join(f"{a} {v:.4f}" for a, v in sorted(f["grpo_arms"].items()))
        lines.append(f"- {f['task']} ({f['record']}): baseline `{f['baseline']}`"
                     + (f"; GRPO arms {arms}; pick `{f['grpo_pick']}`" if arms else ""))
        for a, d in f.get("arms_vs_pick", {}).items():
            lines.append(f"  - against the pool's pick: {a} Δ {d['primary']['diff']:+.4f}, compute-to-target "
                         f"{_x(d['compute_to_target'])}")
    return "\n".join(lines) + "\n"


def plot(figs: list[dict], path: Path) -> None:
    """Each (task, arm) at its plan's own p0: open circles for exploration, filled squares for the confirmatory
    plan; "not reached" (ratio 0) drawn at the floor as a down-pointing marker."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    floor, top = 0.25, 10.0  # log axis
    fig, ax = plt.subplots(figsize=(9, 4.5))
    arms = sorted({a for f in figs for a in f["arms"]})
    offsets = dict(zip(arms, np.linspace(-0.012, 0.012, len(arms))))  # spread points that share a task's p0
    for i, a in enumerate(arms):
        for confirmatory in (False, True):
            pts = [(f["p0"] + offsets[a], f["arms"][a]["compute_to_target"]) for f in figs
                   if a in f["arms"] and bool(f.get("confirmatory")) == confirmatory]
            pts = [(p, g) for p, g in pts if g and g.get("defined") and np.isfinite(g["ratio"])]
            style = {"color": f"C{i}", "marker": "s" if confirmatory else "o",
                     "markerfacecolor": f"C{i}" if confirmatory else "none"}
            label = f"{a} ({'confirmatory' if confirmatory else 'exploratory'})"
            shown = [(p, g) for p, g in pts if g["ratio"] > 0]
            if shown:
                y = np.array([g["ratio"] for _, g in shown])
                lo = np.array([max(g["lo"], floor) for _, g in shown])
                hi = np.array([min(g["hi"], top) for _, g in shown])
                ax.errorbar([p for p, _ in shown], y, yerr=[np.maximum(y - lo, 0), np.maximum(hi - y, 0)],
                            linestyle="none", capsize=3, label=label, **style)
            unreached = [p for p, g in pts if g["ratio"] == 0]
            if unreached:
                ax.plot(unreached, [floor * 1.08] * len(unreached), linestyle="none",
                        **{**style, "marker": "v"}, label=None if shown else label)
    p = np.linspace(0.05, 0.9, 100)
    ax.plot(p, 1 / (1 - p), "k--", lw=1, label="1/(1 - p0)")
    ax.axhline(1.0, color="grey", lw=0.8)
    for f in figs:  # each plan's label at its own p0: exploration on the top row, the confirmatory plan below
        ax.annotate(f["task"], (f["p0"], top * (0.55 if f.get("confirmatory") else 0.8)), ha="center", fontsize=7,
                    color="grey", rotation=90 if f.get("confirmatory") else 0)
    ax.set_ylim(floor, top)
    ax.text(0.01, 0.01, "▼ at the floor: not reached within the budget", transform=ax.transAxes, fontsize=7, color="grey")
    ax.set_yscale("log")
    ax.set_xlabel("initial zero-variance share p0 (tuned GRPO, first 3 steps)")
    ax.set_ylabel("compute-to-target vs tuned GRPO (x)")
    ax.set_title("Saving against the zero-variance share\n(open: validation, 3 seeds; filled: test split, 10 seeds)",
                 fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="prefix of the .json, .md and .png written")
    args = ap.parse_args(argv)
    figs, missing = [], []
    for src in SOURCES:
        if not (RESULTS / src.record / "runs.tar.xz").exists():
            missing.append(src.record)
            continue
        print(f"zero_var_saving: {src.record} ...", flush=True)
        figs.append(source_figures(src))
    if missing:
        print(f"zero_var_saving: records not (yet) archived, left out: {', '.join(missing)}")
    by_task: dict[tuple, dict] = {}
    for f in figs:  # a task read from two records of one kind: one point per arm, p0 from its first record
        t = by_task.setdefault((f["task"], f["confirmatory"]), {**f, "arms": {}})
        t["arms"].update(f["arms"])
    command = "python benchmarks/zero_var_saving.py"
    Path(f"{args.out}.json").write_text(json.dumps({"command": command, "p0_steps": P0_STEPS, "missing": missing,
                                                    "sources": figs}, indent=1, default=float) + "\n")
    Path(f"{args.out}.md").write_text(markdown(figs, command))
    plot(list(by_task.values()), Path(f"{args.out}.png"))
    print(f"zero_var_saving: wrote {args.out}.json, .md, .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
