"""Regenerate the results that the README and the docs state, from the recorded benches (never typed by hand).

    python benchmarks/update_readme.py           # rewrite them
    python benchmarks/update_readme.py --check   # exit 1 if README.md or docs/results.md differs (a test runs it)

- README.md, between <!-- units:begin --> and <!-- units:end -->: the compact both-units table (below);
  between <!-- results:begin --> and <!-- results:end -->: the Bench 3.0 verdicts (below).
- docs/results.md, between <!-- earlier:begin --> and <!-- earlier:end -->: the earlier benches' rows a
  reader should know, each with its label (how many seeds; exploratory where the choice was made on the
  seeds it is reported on) and the record it comes from.
- docs/results.md, between the same markers: the full tables of Bench 2.0 and its long bench (every planner,
  every figure), from benchmarks/results/bench2/summary.json and bench2_long/summary.json.
Other issues add their rows to SUMMARY_ROWS (task 2's records) or their benches to BENCHES.
- Above them, the Bench 3.0 verdicts: one row per arm of each confirmatory plan in CONFIRMATORY whose record
  is complete (every arm paired on every seed), or a line saying the plan is still running. Only committed
  files are read, so the slot is the same on every checkout.
- docs/results.md, between <!-- units:begin --> and <!-- units:end -->: the compact results table that leads
  with both units (compute-to-target in compute units, measured; GPU-hours to target, modelled, with its split
  into steps x GPU-seconds per step), from benchmarks/results/gpu_hours_records.json (written by
  `python benchmarks/gpu_hours_records.py`). `--units` prints its compact form (the arms not found lower),
  for the README.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rollwise.bench.plan_report import _d, _ratio, _rpg
from rollwise.bench.report import _fmt_diff, _fmt_ratio, legend, markdown_table
from rollwise.core.generated import between, sync

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_holm import bench_wide  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
UNITS_BEGIN, UNITS_END = "<!-- units:begin -->", "<!-- units:end -->"
EARLY_BEGIN, EARLY_END = "<!-- earlier:begin -->", "<!-- earlier:end -->"
UNITS_RECORD = RESULTS / "gpu_hours_records.json"

# (record, title) of the benches whose full tables docs/results.md shows. The earlier benches (bench_full,
# bench_120k, bench_mixes, bench_pc_tuned) ran on a base that cannot be rebuilt; their reports stay in
# benchmarks/results/ as records, out of the tables.
BENCHES = (("bench2", "Bench 2.0: GRPO, the oracle and the other planners, 8 seeds each, on the shipped base"),
           ("bench2_long", "The long bench: 120,000 tokens, a pool of 1,000 prompts, 8 seeds each, on the shipped base"))

# Bench 3.0's confirmatory plans: (record, plan, task as the table names it), in the order the README shows them.
CONFIRMATORY = (("bench3_confirm_remainder", "benchmarks/plans/remainder_confirm_1.yaml", "testbed (remainder)"),
                ("bench3_confirm_task1", "benchmarks/plans/task1_confirm_1.yaml", "1 (arithmetic), plan 1"),
                ("bench3_confirm2_task1", "benchmarks/plans/task1_confirm_2.yaml", "1 (arithmetic), plan 2"),
                ("bench3_confirm3_task1", "benchmarks/plans/task1_confirm_3.yaml", "1 (arithmetic), plan 3"),
                ("bench3_confirm_llama", "benchmarks/plans/llama_confirm_1.yaml",
                 "testbed, Llama 6.0M (primary: sampled)"),
                ("task1_confirm_4", "benchmarks/plans/task1_confirm_4.yaml", "1 (arithmetic), plan 4: fresh data"),
                # the suite's plan, a file per task (its Holm over the five: bench_holm.py --suite suite_confirm)
                *((f"suite_confirm_{k}", f"benchmarks/plans/suite_confirm_{k}.yaml", f"suite: {label}, data seed 2")
                  for k, label in (("task1", "task 1"), ("remainder", "testbed"), ("easy", "easy pool"),
                                   ("hard", "hard pool"))),
                # the hard pool after its reweighting (level 6), a family of its own
                ("pool_l6_confirm", "benchmarks/plans/pool_l6_confirm.yaml", "hard pool, level 6, data seed 2"))

EXPLORATORY = "exploratory: the composition was chosen after these seeds' results were seen"
# Task 2's rows in the summary: (record, variant, label). A record is a bench directory (its summary.json, from
# `rollwise bench`) or a benchmarks/generate3_tune.py record (RECORD.json).
SUMMARY_ROWS = (
    ("generate3_8seeds", "duet-abort", "defaults"),
    ("generate3_8seeds", "arrol", "defaults"),
    ("generate3_confirm", "arrol r3+duet-abort", EXPLORATORY + "; ARRoL's ratio 3 picked on seeds 100–102"),
    ("generate3_confirm", "arrol+duet-abort", EXPLORATORY),
    ("generate3_confirm", "arrol r3", "ratio 3 picked on seeds 100–102, reported on 0–7"),
    ("generate3_composed", "greso+ar3po+arrol r3+duet-abort", EXPLORATORY),
    ("generate3_selection", "greso", "selection only, defaults"),
    ("generate3_selection", "greso+ar3po", "task 1's best, defaults"),
)


def bench_section(path: Path, title: str) -> str:
    s = json.loads(path.read_text())
    out = [f"**{title}** — `{s['command']}`: budget {s['budget_tokens']:,} generated tokens per run, "
           f"{s['seeds']} seeds, pool {s['pool_size']} prompts, held-out {s['eval_size']} prompts.", ""]
    for mix in s["mixes"]:
        out += [f"Mix `{mix}`:", "", markdown_table(s, mix), ""]
    return "\n".join(out)


def results_tables() -> str:
    parts = [legend(), ""]  # once, above the tables it explains
    for name, title in BENCHES:
        p = RESULTS / name / "summary.json"
        if p.exists():
            parts.append(bench_section(p, title))
    return "\n".join(parts)


def _row(task: str, planner: str, d: dict, seeds: int, label: str, record: str) -> str:
    return (f"| {task} | `{planner}` | {_fmt_diff(d['auc_diff'])} | {d['verdict']} | {_fmt_ratio(d)} | "
            f"{seeds} | {label} | `{record}` |")


def complete(s: dict) -> bool:
    """A confirmatory record every arm of which is paired with the baseline on every plan seed."""
    return s.get("kind") == "confirmatory" and bool(s["arms"]) and all(
        d["seeds_paired"] == len(s["seeds"]) for d in s["arms"].values())


def verdicts() -> str:
    """Bench 3.0's verdicts, from the confirmatory records (the README shows them first)."""
    out = ["**Bench 3.0 verdicts** (confirmatory: each plan was committed before its runs; the test split; seeds "
           "never used to choose; against tuned GRPO; Holm over each plan's family). Δ: mean greedy test accuracy "
           "(the mean of 2 samples at temperature 1 where the task column says sampled) over the compute budget (`gpu-h100-v1`), arm − tuned GRPO on the same seed, 95% bootstrap interval; "
           "compute-to-target (old target, kept for one release; the table above reads the symmetric one): tuned "
           "GRPO's compute to reach its own accuracy at the budget over the arm's "
           "(> 1: less compute; not reached: the arm's mean curve stays below it within the budget, at an "
           "interval's end in at least 2.5% of resamples). Arms outside the family are described, not decided. "
           "From plan 4 on a verdict also needs the two-way interval (prompts and seeds) to exclude 0.", "",
           "| task | arm | planner | Δ vs tuned GRPO [95% CI] | p (Holm) | p (Holm, bench-wide) | verdict | "
           "compute-to-target, old target [95% CI] | goal met | rows/group (GRPO) | seeds | record |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    # Holm over every confirmatory hypothesis recorded so far (benchmarks/bench_holm.py), beside each plan's own
    wide = {(h["record"], h["arm"]): h["p_bench"] for h in bench_wide(RESULTS)}
    pending = []
    for record, plan, task in CONFIRMATORY:
        path = RESULTS / record / "summary.json"
        s = json.loads(path.read_text()) if path.exists() else None
        if s is None or not complete(s):
            pending.append(f"- {task}: `{plan}` (committed before its runs) is running; no verdict until every "
                           "run is in.")
            continue
        for arm, d in sorted(s["arms"].items(), key=lambda kv: (not kv[1]["in_family"], -kv[1]["primary"]["diff"])):
            holm = ("< 0.0001" if d["p_holm"] < 1e-4 else f"{d['p_holm']:.4f}") if "p_holm" in d else "—"
            bw = wide.get((record, arm))
            bw = "—" if bw is None else "< 0.0001" if bw < 1e-4 else f"{bw:.4f}"
            out.append(f"| {task} | {arm} | `{d['planner']}` | {_d(d['primary'])} | {holm} | {bw} | {d['verdict']} | "
                       f"{_ratio(d['goal'])} | {'yes' if d.get('goal_met') else 'no'} | "
                       f"{_rpg(d['rows_per_group'])} ({_rpg(d['rows_per_group_base'])}) | {d['seeds_paired']} | "
                       f"`benchmarks/results/{record}` |")
    if len(out) == 4:  # no complete record: no table
        out = out[:1]
    return "\n".join(out + ([""] if pending else []) + pending)


def earlier_benches() -> str:
    """The earlier benches' rows a reader should know (docs/results.md, above their full tables)."""
    out = ["**Earlier benches** (before Bench 3.0: GRPO untuned, one held-out set, token budget). "
           "Mean held-out accuracy over the token budget, planner − GRPO on the same seed, with a 95% paired "
           "bootstrap interval over seeds; tokens-to-target is GRPO's tokens to reach its own final accuracy over "
           "the planner's (> 1: fewer tokens). No figure here comes from a plan committed before its runs "
           "(Bench 3.0's confirmatory standard). The full tables below.", "",
           "| task | planner | Δ vs GRPO [95% CI] | verdict | tokens-to-target [95% CI] | seeds | label | record |",
           "|---|---|---|---|---|---|---|---|"]
    notes = []
    for name, budget in (("bench2", "40k tokens"), ("bench2_long", "120k tokens")):
        s = json.loads((RESULTS / name / "summary.json").read_text())
        planners = s["mixes"]["default"]["planners"]
        for p, d in sorted(planners.items(), key=lambda kv: -kv[1]["auc_diff"]["diff"]):
            if d["verdict"] == "higher":
                out.append(_row(f"1, {budget}", p, d, d["runs"], "defaults; the whole bench is reported",
                                f"benchmarks/results/{name}"))
        by = {v: sorted(p for p, d in planners.items() if d["verdict"] == v)
              for v in ("no difference shown", "lower")}
        notes.append(f"- Task 1, {budget} ({len(planners) - 1} planners against GRPO): no difference shown for "
                     f"{', '.join(by['no difference shown']) or 'none'}; lower for {', '.join(by['lower']) or 'none'}.")
    for record, variant, label in SUMMARY_ROWS:
        bench = RESULTS / record / "summary.json"
        if bench.exists():
            d = json.loads(bench.read_text())["mixes"]["default"]["planners"][variant]
            row = (d, d["runs"], f"benchmarks/results/{record}")
        else:
            r = json.loads((RESULTS / f"{record}.json").read_text())
            row = (r["results"][variant], len(r["seeds"]), f"benchmarks/results/{record}.md")
        out.append(_row("2 (chain), 400k tokens", variant, row[0], row[1], label, row[2]))
    return "\n".join(out + [""] + notes)


def _x(g: dict | None, point_only: bool = False) -> str:
    """A time-to-target ratio from gpu_hours_records.json in words ('not reached', 'not defined')."""
    if g is None:
        return "—"
    if g.get("defined") is False:
        return "not defined"

    def f(v):
        return "?" if v != v else "not reached" if v == 0 else "∞" if v == float("inf") else f"{v:.2f}×"
    return f(g["ratio"]) if point_only else f"{f(g['ratio'])} [{f(g['lo'])}, {f(g['hi'])}]"


def units_table(path: Path = UNITS_RECORD, compact: bool = False) -> str:
    """The results table that leads with both units, one row per arm of each record in gpu_hours_records.json:
    compute-to-target in compute units (token counts measured, priced by the plan's cost profile) and GPU-hours
    to target (modelled under the cluster profile), both on Bench 4.0's symmetric target, with the GPU-hours
    split into steps to target (measured) x GPU-seconds per step up to the target (modelled). `compact` (for
    the README): only the arms of each plan's family not found lower, point estimates for the split in one
    column, and the lower arms named in one line below."""
    if not path.exists():
        return (f"GPU-hours to target: not computed yet (`python benchmarks/gpu_hours_records.py` writes "
                f"`{path.name}` in `benchmarks/results`).")
    doc = json.loads(path.read_text())
    task_of = {rec: task for rec, _, task in CONFIRMATORY}
    order = {rec: i for i, (rec, _, _) in enumerate(CONFIRMATORY)}
    records = sorted(doc["records"], key=lambda r: (order.get(r["record"], len(order)), r["record"]))
    fallback = any("step mean" in r["lengths"] for r in records)
    out = [f"**Both units** (Bench 4.0's target: 80% of tuned GRPO's gain; tuned GRPO's cost over the arm's, > 1: "
           f"the arm costs less, 95% bootstrap interval). Compute-to-target: compute units (`gpu-h100-v1`), "
           f"**measured** token counts priced at saturation, so idle time costs nothing. GPU-hours to target: "
           f"**modelled** under `{doc['profile']}` ({doc['validation']}) = steps to target (**measured**) × "
           f"GPU-seconds per step up to the target (**modelled**)."
           + (" Lengths `step mean`: the rows predate per-step length shapes, so every row of a step is put at "
              "its mean length, which misses the tail (the GPU-seconds per step are a lower bound)." if fallback else "")
           + f" From `{doc['command']}`.", ""]
    if compact:
        out += ["| task | arm | verdict | compute-to-target, compute units (measured) | GPU-hours to target (modelled) "
                "| = steps (measured) × GPU-s per step (modelled) | lengths |", "|---|---|---|---|---|---|---|"]
    else:
        out += ["| task | arm | verdict | compute-to-target, compute units (measured) | GPU-hours to target (modelled) "
                "| = steps to target (measured) | × GPU-s per step (modelled) | lengths | record |",
                "|---|---|---|---|---|---|---|---|---|"]
    lower: dict[str, list[str]] = {}
    for rec in records:
        task = task_of[rec["record"]] if rec["record"] in task_of else f"{rec['task']} (`{rec['plan']}`)"
        arms = sorted(rec["arms"].items(), key=lambda kv: (not kv[1]["in_family"], kv[0]))
        for arm, a in arms:
            if compact and (not a["in_family"] or a["verdict"] == "lower"):
                if a["verdict"] == "lower":
                    lower.setdefault(task, []).append(arm)
                continue
            ps = a.get("per_step_to_target")
            ps_text = "—" if ps is None else "not defined" if not ps["defined"] else f"{ps['ratio']:.2f}×"
            steps = _x(a.get("steps_to_target"), True)
            head = (f"| {task} | {arm} | {a['verdict']} | {_x(a['compute_to_target'])} | "
                    f"{_x(a.get('gpu_hours_to_target'))} | ")
            out.append(head + (f"{steps} × {ps_text} | {a.get('lengths', '—')} |" if compact else
                               f"{steps} | {ps_text} | {a.get('lengths', '—')} | `benchmarks/results/{rec['record']}` |"))
    if compact:
        named = "; ".join(f"{t}: {', '.join(arms)}" for t, arms in lower.items()) or "none"
        out += ["", f"Left out, lower in the verdict (accuracy over the compute budget): {named}. Every arm in both "
                "units: [docs/results.md](docs/results.md); each record's split and variants: "
                "`benchmarks/results/gpu_hours_records.md`."]
    return "\n".join(out)


def rendered() -> dict[Path, str]:
    readme, results = ROOT / "README.md", ROOT / "docs" / "results.md"
    docs = between(results.read_text(), BEGIN, END, results_tables())
    docs = between(docs, EARLY_BEGIN, EARLY_END, earlier_benches())
    text = between(readme.read_text(), BEGIN, END, verdicts())
    return {readme: between(text, UNITS_BEGIN, UNITS_END, units_table(compact=True)),
            results: between(docs, UNITS_BEGIN, UNITS_END, units_table())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if README.md or docs/results.md is stale")
    ap.add_argument("--units", action="store_true",
                    help="print the compact both-units results table (for the README); the full one is the block "
                         "between docs/results.md's units markers")
    args = ap.parse_args(argv)
    if args.units:
        print(units_table(compact=True))
        return 0
    return sync(rendered(), ROOT, args.check, "python benchmarks/update_readme.py")


if __name__ == "__main__":
    sys.exit(main())
