"""Holm over a family of confirmatory hypotheses wider than one plan's.

    python benchmarks/bench_holm.py                       # every confirmatory record (issue 47, item 4)
    python benchmarks/bench_holm.py --suite suite_confirm # one plan split over files (issue 43, item 5)

Bench-wide: each confirmatory record's family (its `summary.json`: the arms it decides and their exact
sign-flip p) joins one family; the bench-wide Holm p grows with every plan, so a verdict that passes its own
plan may not pass here. Records are read in the order of their names; nothing is written.

Suite (`--suite PREFIX`): the plan files benchmarks/plans/PREFIX_*.yaml are ONE preregistered plan over
several tasks (a plan names one task, so a suite is a file per task), and their families together are the
decision's family; each is read from its record (benchmarks/results/<file's name>), and a file not run yet
counts with p = 1, so a partial suite is never less strict than the whole. Each arm's verdict is the plan report's own rule (bench/plan_report.py `verdict`) applied with the
suite's Holm p instead of its file's: Holm at the plans' alpha, and where the plans decide on the two-way
interval, that interval on the same side of 0. The goal is read as the plan report reads its own (a verdict
of "higher" and the ratio >= the goal with its interval above 1), on the symmetric compute-to-target, per
task: met when at least `--goal-tasks` tasks have an arm that meets it. It writes PREFIX.{md,json} beside
the records.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from rollwise.bench.plan import load_plan  # noqa: E402
from rollwise.bench.plan_report import verdict  # noqa: E402
from rollwise.bench.stats import holm, min_seeds_for_family  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PLANS = Path(__file__).resolve().parent / "plans"


def hypotheses(results: Path = RESULTS) -> list[dict]:
    out = []
    for f in sorted(results.glob("*/summary.json")):
        s = json.loads(f.read_text())
        if s.get("kind") != "confirmatory":
            continue
        for arm in s.get("family", []):
            d = s["arms"].get(arm, {})
            out.append({"record": f.parent.name, "arm": arm, "p": d.get("p", 1.0), "p_plan": d.get("p_holm", 1.0),
                        "diff": d.get("primary", {}).get("diff")})
    return out


def bench_wide(results: Path = RESULTS) -> list[dict]:
    """Every confirmatory hypothesis with `p_bench`, Holm over all of them (the family grows with each plan)."""
    hs = hypotheses(results)
    for h, adj in zip(hs, holm([h["p"] for h in hs])):
        h["p_bench"] = float(adj)
    return hs


def suite(prefix: str, results: Path = RESULTS, plans: Path = PLANS, goal_tasks: int = 3) -> dict:
    """The suite's verdicts: Holm over the families of the plan files PREFIX_*.yaml (what was preregistered),
    each read from its record under `results` (same name) when it has run, each arm judged by its plan's rule."""
    files = sorted(plans.glob(f"{prefix}_*.yaml"))
    if not files:
        raise SystemExit(f"bench_holm: no plan files named {prefix}_*.yaml under {plans}")
    loaded, summaries = {}, {}
    for f in files:
        rec = results / f.stem
        loaded[f.stem], _ = load_plan(rec / "plan.yaml" if (rec / "plan.yaml").exists() else f)
        if loaded[f.stem].kind != "confirmatory":
            raise SystemExit(f"bench_holm: {f.name} is {loaded[f.stem].kind!r}, not confirmatory: not a suite file")
        if (rec / "summary.json").exists():
            summaries[f.stem] = json.loads((rec / "summary.json").read_text())
    alphas = {p.alpha for p in loaded.values()}
    if len(alphas) != 1:
        raise SystemExit(f"bench_holm: the suite's files disagree on alpha ({sorted(alphas)}): not one plan")
    family = [(r, a) for r, p in loaded.items() for a in p.family]
    arm = {(r, a): summaries.get(r, {}).get("arms", {}).get(a, {}) for r, a in family}
    # an arm without results yet counts with p = 1, as in a plan's own report: partial is never less strict
    adjusted = holm([arm[k].get("p", 1.0) for k in family])
    alpha = alphas.pop()
    fewest = min_seeds_for_family(len(family), alpha)
    rows = []
    for (r, a), adj in zip(family, adjusted):
        d, plan = arm[r, a], loaded[r]
        row = {"record": r, "task": plan.task, "task_options": dict(plan.options), "arm": a,
               "seeds": d.get("seeds_paired", 0), "p": d.get("p", 1.0), "p_file": d.get("p_holm", 1.0),
               "p_suite": float(adj), "primary": d.get("primary"), "two_way": d.get("primary_two_way"),
               "symmetric": d.get("symmetric")}
        row["verdict"] = verdict(d, float(adj), plan, fewest) if d.get("seeds_paired") else "not run yet"
        g = row["symmetric"] or {}
        row["goal_met"] = bool(row["verdict"] == "higher" and g.get("defined") and g["ratio"] >= plan.goal_ratio
                               and g["lo"] > 1)
        rows.append(row)
    met_tasks = sorted({r["record"] for r in rows if r["goal_met"]})
    return {"prefix": prefix, "alpha": alpha, "family_size": len(family), "fewest_seeds": fewest, "rows": rows,
            "goal_ratio": sorted({p.goal_ratio for p in loaded.values()}), "goal_tasks": goal_tasks,
            "not_run": sorted(set(loaded) - set(summaries)),
            "tasks_meeting_goal": met_tasks, "goal_met": len(met_tasks) >= goal_tasks}


def _iv(d: dict | None, key: str = "diff") -> str:
    return "-" if not d else f"{d[key]:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]"


def _ratio(g: dict | None) -> str:
    if not g or not g.get("defined"):
        return "not defined"
    return ("not reached" if g["ratio"] == 0 else f"{g['ratio']:.2f}x") + f" [{g['lo']:.2f}, {g['hi']:.2f}]"


def suite_markdown(v: dict, command: str) -> str:
    lines = [f"# {v['prefix']}: the suite's verdicts", "",
             f"`{command}`. One family of {v['family_size']} over the suite's files, Holm at alpha {v['alpha']}; "
             "an arm passes where its suite-Holm p is under alpha and its two-way interval (seeds and held-out "
             "prompts) is on the same side of 0. Primary: greedy accuracy, mean over the compute budget, test "
             "split. Compute-to-target: the symmetric definition (80% of tuned GRPO's gain), compute units.", "",
             "| task | arm | seeds | Δ primary [seeds 95%] | two-way [95%] | p | Holm, its file | Holm, suite | "
             "verdict | compute-to-target | goal |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in v["rows"]:
        lines.append(f"| {r['record']} | {r['arm']} | {r['seeds']} | {_iv(r['primary'])} | {_iv(r['two_way'])} | "
                     f"{r['p']:.4f} | {r['p_file']:.4f} | {r['p_suite']:.4f} | {r['verdict']} | "
                     f"{_ratio(r['symmetric'])} | {'met' if r['goal_met'] else 'not met'} |")
    if v["not_run"]:
        lines += ["", f"Not run yet (their hypotheses count with p = 1): {', '.join(v['not_run'])}."]
    lines += ["", f"Goal (>= {'/'.join(f'{g:g}' for g in v['goal_ratio'])}x compute-to-target, passing, on at least "
              f"{v['goal_tasks']} tasks): **{'met' if v['goal_met'] else 'not met'}** "
              f"({len(v['tasks_meeting_goal'])} task(s) meet it{': ' + ', '.join(v['tasks_meeting_goal']) if v['tasks_meeting_goal'] else ''})."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", metavar="PREFIX", help="judge the records PREFIX_* as one plan's family")
    ap.add_argument("--goal-tasks", type=int, default=3, help="tasks that must meet the goal (issue 43: 3)")
    args = ap.parse_args(argv)
    if args.suite:
        v = suite(args.suite, goal_tasks=args.goal_tasks)
        command = f"python benchmarks/bench_holm.py --suite {args.suite}"
        md = suite_markdown(v, command)
        if v["not_run"]:  # a partial suite is printed, never recorded as the suite's verdict
            print(md)
            return 0
        (RESULTS / f"{args.suite}.md").write_text(md)
        (RESULTS / f"{args.suite}.json").write_text(json.dumps({"command": command, **v}, indent=1, default=float))
        print(md)
        return 0
    hs = bench_wide()
    print(f"{len(hs)} confirmatory hypotheses; alpha 0.05\n")
    print("| record | arm | Δ primary | p (sign-flip) | Holm, its plan | Holm, bench-wide |")
    print("|---|---|---|---|---|---|")
    for h in hs:
        print(f"| {h['record']} | {h['arm']} | {h['diff']:+.4f} | {h['p']:.4f} | {h['p_plan']:.4f} | {h['p_bench']:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
