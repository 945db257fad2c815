"""Every plan record's GPU-hours to target, recomputed from its archived raw runs (issue 41 item 6).

    python benchmarks/gpu_hours_records.py                 # the confirmatory records
    python benchmarks/gpu_hours_records.py --all           # every plan record with archived runs
    python benchmarks/gpu_hours_records.py --records bench3_confirm_llama [--out PREFIX]

For each record (a folder of benchmarks/results with plan.yaml, summary.json and runs.tar.xz) its runs are
unpacked into a temporary folder (the record is never written) and the plan report's own summary is
recomputed over them (bench/plan_report.py `summarize_plan`; the power calculation at 20 simulations, which
draws from its own generator, so no other figure moves). Its recorded compute-to-target is compared with the
recomputed one, so a figure here comes from the same runs as the record's. Per arm against the baseline:

  * compute-to-target in compute units (counts measured, priced by the plan's cost profile), Bench 4.0's
    symmetric definition (80% of tuned GRPO's gain), beside Bench 3.0's (its own accuracy at the budget);
  * GPU-hours to target under `h100x16-llama8b-v1` (modelled; bench/clock.py `modelled`) and its split:
    steps to target (measured) x GPU-seconds per step up to the target (modelled) = GPU-hours to target;
  * the second variant (a lognormal long tail) and which lengths each used: "shape" where the rows carry
    one, else "step mean" (every row of a step at the step's mean: the tail missed; systems/scale.py).

And, on every record listed whose rows DO carry a shape, and on CHECK_RECORDS (read for this alone), the
fallback check: the same figures with the shape removed (so read through "step mean"), to show how far the
fallback is from the full shape on real runs.

Writes PREFIX.json and PREFIX.md (default benchmarks/results/gpu_hours_records); benchmarks/update_readme.py
reads the JSON for the results table that leads with both units.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from rollwise.bench import clock, stats
from rollwise.bench.plan import load_plan
from rollwise.bench.plan_report import load_arm, metric_rows, summarize_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from archive import ARCHIVE, RESULTS, unpack  # noqa: E402  (benchmarks/archive.py)

ROOT = RESULTS.parent.parent
DEFAULT_OUT = RESULTS / "gpu_hours_records"
POWER_SIMS = 20  # the power calculation is not read here; it draws from its own generator
# Records read for the fallback check alone (not in the table): rows with a shape and an arm that acts on the
# spread of lengths (tail batching), the case the step-mean fallback cannot see
CHECK_RECORDS = ("lossless_explore_2",)


def plan_records(confirmatory_only: bool = True) -> list[str]:
    """Records of planned benches whose runs are archived, by name; confirmatory ones unless told."""
    out = []
    for d in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
        if not all((d / f).exists() for f in ("plan.yaml", "summary.json", ARCHIVE)):
            continue
        if confirmatory_only and json.loads((d / "summary.json").read_text()).get("kind") != "confirmatory":
            continue
        out.append(d.name)
    return out


def _ratio(g: dict | None) -> dict | None:
    """The figures a table needs from a time-to-target dict (the draws and crossings left out)."""
    if g is None:
        return None
    keep = ("ratio", "lo", "hi", "defined", "cost_base", "cost_arm", "target")
    return {k: g[k] for k in keep if k in g}


def _no_shape(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("len_")} for r in rows]


def fallback_check(plan, out: Path, metric: str) -> dict:
    """Per arm: GPU-hours to target and GPU-seconds per step with the rows' shape, and again with it removed
    (read through the step-mean fallback), from one generator state each, so only the lengths differ."""
    runs = {a: load_arm(plan, out, a) for a in plan.arms}
    base = runs[plan.baseline]
    res = {}
    for arm in plan.arms:
        if arm == plan.baseline:
            continue
        paired = [i for i in range(len(plan.seeds)) if runs[arm][i] is not None and base[i] is not None]
        b, a = [base[i] for i in paired], [runs[arm][i] for i in paired]
        bx, ax = [metric_rows(r["rows"], metric) for r in b], [metric_rows(r["rows"], metric) for r in a]
        fig = {}
        for label, strip in (("shape", False), ("step mean", True)):
            def view(rs):
                return [{**r, "rows": _no_shape(r["rows"])} for r in rs] if strip else rs
            g = clock.modelled(view(b), view(a), bx, ax, np.random.default_rng(0))
            fig[label] = {"lengths": g["lengths"], "gpu_hours": _ratio(g["to_target"]),
                          "per_step_to_target": g["split"]["per_step"], "per_step": g["per_step"]}
        res[arm] = fig
    return res


def check_only(name: str) -> dict:
    """The fallback check alone on a record whose rows carry a shape (CHECK_RECORDS)."""
    with tempfile.TemporaryDirectory() as tmp:
        unpack(RESULTS / name, Path(tmp))
        plan, _ = load_plan(RESULTS / name / "plan.yaml")
        return {"record": name, "fallback_check": fallback_check(plan, Path(tmp), plan.metric())}


def record_figures(name: str) -> dict:
    """The record's figures recomputed from its archived runs (module docstring)."""
    rec_dir = RESULTS / name
    recorded = json.loads((rec_dir / "summary.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        unpack(rec_dir, out)
        plan, _ = load_plan(rec_dir / "plan.yaml")
        s = summarize_plan(plan, out, power_sims=POWER_SIMS)
        arms = {}
        for arm, d in s["arms"].items():
            if not d.get("seeds_paired"):
                continue
            g = d.get("gpu_hours")
            rec_goal = recorded["arms"].get(arm, {}).get("goal", {}).get("ratio")
            arms[arm] = {
                "in_family": d["in_family"], "seeds_paired": d["seeds_paired"], "verdict": d.get("verdict"),
                "compute_to_target": _ratio(d["symmetric"]), "compute_to_target_bench3": _ratio(d["goal"]),
                "matches_record": rec_goal is not None and bool(
                    np.isclose(rec_goal, d["goal"]["ratio"], rtol=1e-9, equal_nan=True)),
                **({} if g is None else {
                    "lengths": g["lengths"], "factor": g["factor"], "profile": g["profile"],
                    "steps_to_target": _ratio(g["split"]["steps"]), "per_step_to_target": g["split"]["per_step"],
                    "gpu_hours_to_target": _ratio(g["to_target"]), "per_step_whole_run": g["per_step"],
                    "longtail": {"lengths": g["longtail"]["lengths"], "sigma": g["longtail"]["sigma"],
                                 "gpu_hours_to_target": _ratio(g["longtail"]["to_target"]),
                                 "per_step_whole_run": g["longtail"]["per_step"],
                                 "sensitivity": {k: {"gpu_hours_to_target": v["to_target"]["ratio"],
                                                     "per_step_whole_run": v["per_step"]["ratio"]}
                                                 for k, v in g["longtail"]["sensitivity"].items()}}})}
        lengths = sorted({a["lengths"] for a in arms.values() if "lengths" in a})
        fig = {"record": name, "plan": s["plan"], "kind": s["kind"], "task": s["task"], "metric": s["metric"],
               "baseline": s["baseline"], "cost_profile": s["profile"], "cluster_profile": clock.MODEL_PROFILE,
               "lengths": lengths, "arms": arms}
        if lengths == ["shape"]:
            fig["fallback_check"] = fallback_check(plan, out, s["metric"])
    return fig


# ---- the page ----------------------------------------------------------------------------------------
def _r(g: dict | None) -> str:
    return "—" if g is None else stats.ratio_text({"defined": True, **g})


def _ps(p: dict) -> str:
    if not p.get("defined", True) or p["ratio"] != p["ratio"]:
        return "not defined"
    return f"{p['ratio']:.2f}× [{p['lo']:.2f}×, {p['hi']:.2f}×]"


def markdown(records: list[dict], command: str, extra_checks: list[dict] = ()) -> str:
    lines = ["# GPU-hours to target of the plan records, recomputed from their archived runs", "",
             f"`{command}` (benchmarks/gpu_hours_records.py; its docstring says how). Baseline over arm (> 1: the "
             "arm costs less). Compute-to-target: compute units (`gpu-h100-v1`: counts measured, priced), Bench 4.0's "
             "symmetric target (80% of tuned GRPO's gain; Bench 3.0's own-accuracy target in brackets after it). "
             f"GPU-hours: modelled under `{clock.MODEL_PROFILE}` ({clock.VALIDATION}), split as steps to target "
             "(sample efficiency, measured) × GPU-seconds per step up to the target (hardware efficiency, modelled) "
             "= GPU-hours to target, paired resample by resample.", "",
             "Lengths: `shape` where the metrics rows carry each step's length shape (records from 2026-12-05); "
             "`step mean` where they do not: every row of a step at the step's decoded tokens / rows, which misses "
             "the tail (a synchronous step waits for its longest row), so its seconds per step are a lower bound "
             "and an arm's effect on the spread of lengths is seen only through its mean. Variant 2 is then a "
             "lognormal (sigma 0.8, an assumption) of each step's mean (`step lognormal`) instead of the baseline's "
             "map.", "",
             "| record | arm | verdict | compute-to-target (compute units, measured) | steps to target (measured) "
             "| × GPU-s per step to target (modelled) | = GPU-hours to target (modelled) | variant 2: GPU-hours "
             "(sigma ×0.5 / ×2) | lengths |", "|---|---|---|---|---|---|---|---|---|"]
    for rec in records:
        for arm, a in rec["arms"].items():
            bench3 = a["compute_to_target_bench3"]
            ct = f"{_r(a['compute_to_target'])} ({_point(bench3['ratio'])})"
            if "gpu_hours_to_target" not in a:
                lines.append(f"| `{rec['record']}` | {arm} | {a['verdict']} | {ct} | — | — | not available | — | — |")
                continue
            lt = a["longtail"]
            sens = lt["sensitivity"]
            ps = a["per_step_to_target"]
            ps_text = _ps(ps) + (f" ({ps['base_s']:,.0f} s / {ps['arm_s']:,.0f} s)" if ps["defined"] else "")
            lines.append(f"| `{rec['record']}` | {arm} | {a['verdict']} | {ct} | {_r(a['steps_to_target'])} | "
                         f"{ps_text} | {_r(a['gpu_hours_to_target'])} | {_r(lt['gpu_hours_to_target'])} "
                         f"({_point(sens['x0.5']['gpu_hours_to_target'])} / "
                         f"{_point(sens['x2']['gpu_hours_to_target'])}) | {a['lengths']} |")
    lines += ["", "Which records lack lengths, and the variant each used:", ""]
    for rec in records:
        used = ", ".join(rec["lengths"]) or "none (no arm paired)"
        lines.append(f"- `{rec['record']}` ({rec['task']}, plan `{rec['plan']}`): lengths {used}"
                     + (" — no length shape in its rows; variant 1 step mean, variant 2 step lognormal"
                        if "step mean" in rec["lengths"] else "")
                     + ("; recomputed compute-to-target equals the record's" if all(
                         a["matches_record"] for a in rec["arms"].values()) else
                        "; WARNING: a recomputed compute-to-target differs from the record's"))
    checks = [r for r in records if r.get("fallback_check")] + list(extra_checks)
    if checks:
        lines += ["", "The fallback against the full shape, on records whose rows carry one (the shape removed and "
                  "read again through `step mean`; one generator state for both, so only the lengths differ; "
                  f"{', '.join(f'`{c}`' for c in CHECK_RECORDS)} read for this check alone: tail batching acts on "
                  "the spread of lengths, which the fallback cannot see):", "",
                  "| record | arm | GPU-hours to target: shape | step mean | GPU-s per step to target: shape "
                  "| step mean | GPU-s per step, whole run: shape | step mean |", "|---|---|---|---|---|---|---|---|"]
        for rec in checks:
            for arm, f in rec["fallback_check"].items():
                sh, sm = f["shape"], f["step mean"]
                lines.append(f"| `{rec['record']}` | {arm} | {_r(sh['gpu_hours'])} | {_r(sm['gpu_hours'])} | "
                             f"{_ps(sh['per_step_to_target'])} | {_ps(sm['per_step_to_target'])} | "
                             f"{_ps(sh['per_step'])} | {_ps(sm['per_step'])} |")
    return "\n".join(lines) + "\n"


def _point(x: float) -> str:
    return "not reached" if x == 0 else "∞" if x == float("inf") else "?" if x != x else f"{x:.2f}×"


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer, np.bool_)):
        return x.item()
    return x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", nargs="*", help="record names (default: every confirmatory plan record)")
    ap.add_argument("--all", action="store_true", help="every plan record with archived runs, not only confirmatory")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output prefix: writes PREFIX.json and PREFIX.md")
    ap.add_argument("--check-records", nargs="*", default=None,
                    help=f"records read for the fallback check alone (default without --records: "
                         f"{' '.join(CHECK_RECORDS)})")
    args = ap.parse_args(argv)
    names = args.records or plan_records(confirmatory_only=not args.all)
    extra = args.check_records if args.check_records is not None else ([] if args.records else list(CHECK_RECORDS))
    extra = [n for n in extra if n not in names]
    for n in names + extra:
        if not all((RESULTS / n / f).exists() for f in ("plan.yaml", "summary.json", ARCHIVE)):
            raise SystemExit(f"gpu_hours_records: {n!r} is not a plan record with archived runs in {RESULTS} "
                             f"(have: {', '.join(plan_records(False))})")
    records = []
    for n in names:
        print(f"{n} ...", flush=True)
        records.append(record_figures(n))
    checks = []
    for n in extra:
        print(f"{n} (the fallback check) ...", flush=True)
        checks.append(check_only(n))
    command = "python benchmarks/gpu_hours_records.py" + (" --all" if args.all else "") + (
        f" --records {' '.join(args.records)}" if args.records else "") + (
        f" --check-records {' '.join(args.check_records)}" if args.check_records is not None else "")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(
        {"command": command, "profile": clock.MODEL_PROFILE, "validation": clock.VALIDATION,
         "records": _jsonable(records), "checks": _jsonable(checks)}, indent=1, allow_nan=True) + "\n")
    out.with_suffix(".md").write_text(markdown(records, command, checks))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
