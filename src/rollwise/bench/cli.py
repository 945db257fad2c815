"""`rollwise bench`: equal-budget comparison of planners against GRPO (see runner.py and report.py)."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from .runner import BenchConfig, run_all, task_bench_defaults, task_mixes

# `--quick`: a shipped plan (tuned GRPO, a compute budget, both evaluation figures, two seeds that decide nothing)
QUICK_PLAN = Path(__file__).resolve().parent.parent / "assets" / "plans" / "quick.yaml"


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="equal-budget comparison of planners against GRPO",
                       description="`rollwise bench [options]`, `rollwise bench --plan PLAN.yaml [--dry-run]`, or "
                                   "`rollwise bench status DIR`")
    p.add_argument("what", nargs="*", metavar="status DIR",
                   help="`status DIR`: runs done and left, core-hours spent and left, of a bench made with --plan")
    p.add_argument("--plan", help="a bench plan (YAML; docs/bench3.md): arms, seeds, data seed, budget, evaluation, "
                                  "family and decision rule, recorded with its hash before the first run")
    p.add_argument("--dry-run", action="store_true", dest="dry_run",
                   help="with --plan: print the estimated core-hours per arm and in total, run nothing")
    p.add_argument("--quick", action="store_true",
                   help="the shipped quick plan (src/rollwise/assets/plans/quick.yaml): tuned GRPO against pods+ar3po "
                        "and one-step-off on task 1, a compute budget, 2 seeds (a first look, no verdict)")
    p.add_argument("--planners", help="comma-separated planner specs (uniform = GRPO is always included)")
    p.add_argument("--task",
                   help="a registered task (arithmetic, chain, ...); its defaults set the budget and mixes")
    p.add_argument("--mixes", help="comma-separated pool difficulty mixes (arithmetic: default, easy, hard; "
                                   "another task: its own `bench_mixes`, or default)")
    p.add_argument("--seeds", type=int, help="how many seeds")
    p.add_argument("--seed-start", type=int, dest="seed_start",
                   help="the first seed (default 0); tune on seeds that are not the reported ones, e.g. 100")
    p.add_argument("--budget", type=int, help="generated tokens per run")
    p.add_argument("--jobs", type=int, help="runs at once (one core each; default 2)")
    p.add_argument("--target", type=float, help="target held-out accuracy (default: GRPO's median final)")
    p.add_argument("--eval-size", type=int, dest="eval_size")
    p.add_argument("--pool-size", type=int, dest="pool_size", help="train pool prompts (revisited over epochs)")
    p.add_argument("--engine", default="torch",
                   help="a registered engine (rollwise list): torch = the tiny model (default); sim = the "
                        "population simulator, same protocol")
    p.add_argument("--sim-profile", dest="sim_profile", default="tiny",
                   help="the simulator's parameters with --engine sim (default: tiny, fitted to the tiny model)")
    p.add_argument("--out", help="where the runs and the report go (default: bench-out; with --plan, bench-NAME)")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from finished runs")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every run (as in `rollwise train --set`)")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    import signal

    from .report import markdown_table, write_report

    # SIGTERM unwinds like Ctrl-C, so run_all's cleanup stops the trainers it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.what:
        if args.what[0] != "status" or len(args.what) != 2:
            raise ValueError(f"bench: unexpected {' '.join(args.what)!r}; expected `rollwise bench status DIR`")
        return cmd_status(args.what[1])
    if args.quick:
        if args.plan:
            raise ValueError("bench: --quick runs the shipped quick plan; drop --plan or --quick")
        given = [k for k in PLAN_SETS if k != "quick" and getattr(args, k, None) not in (None, False, [])]
        if given:
            raise ValueError(f"bench --quick: the quick plan sets what --{given[0].replace('_', '-')} would; drop it, or "
                             "copy src/rollwise/assets/plans/quick.yaml and run it with --plan")
        args.plan, args.quick, args.out = str(QUICK_PLAN), False, args.out or "bench-out"
    if args.plan:
        return cmd_plan(args)
    if args.dry_run:
        raise ValueError("bench: --dry-run needs --plan")
    args.task = args.task or "arithmetic"
    args.out = args.out or "bench-out"
    kw = task_bench_defaults(args.task)  # e.g. a budget sized to the task's response lengths
    kw["task"] = args.task
    if args.planners:
        kw["planners"] = [p.strip() for p in args.planners.split(",") if p.strip()]
    for key in ("seeds", "seed_start", "jobs", "eval_size", "pool_size", "engine", "sim_profile"):
        if getattr(args, key) is not None:
            kw[key] = getattr(args, key)
    if args.budget:
        kw["budget_tokens"] = args.budget
    if args.mixes:
        kw["mixes"] = [m.strip() for m in args.mixes.split(",")]
        mixes = task_mixes(args.task)
        bad = [m for m in kw["mixes"] if m not in mixes]
        if bad:
            raise ValueError(f"unknown mix {bad[0]!r} for task {args.task!r}; available: {', '.join(mixes)}")
    from ..run.config import parse_sets

    extra = parse_sets(args.set)
    cfg = BenchConfig(out=args.out, extra=extra, **kw)
    if "uniform" not in cfg.planners:
        cfg.planners = ["uniform"] + cfg.planners
    if not args.report_only:
        run_all(cfg)
    from .runner import check_finished_runs, run_dir, seed_list

    dirs = [run_dir(cfg, m, p, s) for m in cfg.mixes for p in cfg.planners for s in seed_list(cfg)]
    for note in check_finished_runs(dirs, "bench --report-only" if args.report_only else "bench"):
        print(note)
    argv = [a for a in getattr(args, "argv", sys.argv[1:]) if a != "--report-only"]  # the command that made the runs
    command = "rollwise " + " ".join(shlex.quote(a) for a in argv) if argv[:1] == ["bench"] else "rollwise bench"
    summary = write_report(cfg, command, args.target)
    for mix in cfg.mixes:
        print(f"\n## mix {mix}\n" + markdown_table(summary, mix))
    print(f"\nreport: {args.out}/report.md, {args.out}/report.html, {args.out}/summary.json")
    return 0


PLAN_SETS = ("planners", "task", "mixes", "seeds", "seed_start", "budget", "target", "eval_size", "pool_size",
             "quick", "set")


def cmd_plan(args) -> int:
    """`rollwise bench --plan PLAN.yaml`: record the plan, run its arms, write its report."""
    from .plan import check_plan, load_plan, record_plan, recorded_digest, run_plan, sha256
    from .plan_cost import estimate, format_estimate
    from .plan_report import refuse_empty_report, write_plan_report

    given = [k for k in PLAN_SETS if getattr(args, k, None) not in (None, False, [])]
    if given:
        raise ValueError(f"bench --plan: the plan sets what --{given[0].replace('_', '-')} would; drop it "
                         "(a change is a new plan)")
    if args.engine != "torch" or args.sim_profile != "tiny":
        raise ValueError("bench --plan: the plan names its engine (field 'engine'); drop --engine/--sim-profile")
    plan, raw = load_plan(args.plan)
    out = Path(args.out or f"bench-{plan.name}")
    if args.dry_run:
        check_plan(plan, args.plan)  # the task built and every arm's settings checked: what a real run does first
        print(format_estimate(plan, estimate(plan, out), "dry run (nothing runs)"))
        old = recorded_digest(out)
        if old is not None and old != sha256(raw):
            print(f"note: {out} holds another plan (sha256 {old[:12]}); running this one there is refused")
        return 0
    if args.report_only:
        if recorded_digest(out) is None:
            raise ValueError(f"bench --plan --report-only: {out} holds no recorded plan")
        record_plan(plan, raw, Path(args.plan), out)  # refuses a plan that changed since
        refuse_empty_report(plan, out)
    else:
        run_plan(plan, raw, Path(args.plan), out, jobs=args.jobs or 2)
    from .runner import check_finished_runs

    for note in check_finished_runs(plan_run_dirs(plan, out), f"bench --plan{' --report-only' * args.report_only}"):
        print(note)
    summary = write_plan_report(plan, out)
    for arm, d in summary["arms"].items():
        if d.get("seeds_paired"):
            holm = f", Holm p {d['p_holm']:.4f}" if "p_holm" in d else ""
            print(f"{arm}: Δ {d['primary']['diff']:+.4f} [{d['primary']['lo']:+.4f}, {d['primary']['hi']:+.4f}], "
                  f"p {d['p']:.4f}{holm}: {d['verdict']}")
    print(f"report ({plan.kind}): {out}/report.md, {out}/summary.json")
    return 0


def plan_run_dirs(plan, out) -> list:
    """Every run directory of a planned bench, arm by arm, seed by seed."""
    from .plan import arm_config
    from .runner import run_dir

    return [run_dir(cfg, "default", plan.arms[arm].planner, s)
            for arm in plan.arms for cfg in [arm_config(plan, arm, out)] for s in plan.run_seeds(arm)]


def cmd_status(directory: str) -> int:
    """`rollwise bench status DIR`: a planned bench's runs done and left, core-hours spent and left; a
    finished run whose metrics changed since it finished is flagged, and the exit status is 1."""

    from .plan import recorded_plan
    from .plan_cost import estimate, format_estimate
    from .runner import is_legacy_run, run_record_problem

    out = Path(directory)
    plan = recorded_plan(out)
    est = estimate(plan, out)
    print(format_estimate(plan, est, f"status of {out}"))
    if (out / "runs.tar.xz").exists() and not any((out / "arms").rglob("done.json")):
        print(f"note: the runs of {out} are packed in runs.tar.xz, so none is counted above; "
              f"`python benchmarks/archive.py unpack {out.name}` puts them back")
    done = [d for d in plan_run_dirs(plan, out) if (d / "done.json").exists()]
    bad = [p for p in map(run_record_problem, done) if p]
    for p in bad:
        print(f"WARNING: counted done, but its record no longer holds: {p}")
    legacy = sum(map(is_legacy_run, done))
    if legacy:
        print(f"note: {legacy} of {len(done)} finished runs predate recorded digests (legacy): not checked")
    if bad:
        print(f"WARNING: {len(bad)} finished run(s) changed since they finished; a report over them is refused")
        return 1
    return 0
