"""`rollwise bench`: equal-budget comparison of planners against GRPO (see runner.py and report.py)."""
from __future__ import annotations

import shlex
import sys

from .runner import BenchConfig, run_all, task_bench_defaults, task_mixes

QUICK = dict(planners=["uniform", "dapo", "greso", "oracle"], seeds=2, budget_tokens=40_000, eval_size=1000)


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="equal-budget comparison of planners against GRPO")
    p.add_argument("--quick", action="store_true",
                   help="GRPO, DAPO, GRESO and the oracle, 2 seeds, 40k tokens (2.4–3.1 min on an idle 2-core machine)")
    p.add_argument("--planners", help="comma-separated planner specs (uniform = GRPO is always included)")
    p.add_argument("--task", default="arithmetic",
                   help="a registered task (arithmetic, chain, ...); its defaults set the budget and mixes")
    p.add_argument("--mixes", help="comma-separated pool difficulty mixes (arithmetic: default, easy, hard; "
                                   "another task: its own `bench_mixes`, or default)")
    p.add_argument("--seeds", type=int, help="how many seeds")
    p.add_argument("--seed-start", type=int, dest="seed_start",
                   help="the first seed (default 0); tune on seeds that are not the reported ones, e.g. 100")
    p.add_argument("--budget", type=int, help="generated tokens per run")
    p.add_argument("--jobs", type=int, default=2, help="runs at once (one core each)")
    p.add_argument("--target", type=float, help="target held-out accuracy (default: GRPO's median final)")
    p.add_argument("--eval-size", type=int, dest="eval_size")
    p.add_argument("--pool-size", type=int, dest="pool_size", help="train pool prompts (revisited over epochs)")
    p.add_argument("--engine", default="torch",
                   help="a registered engine (rollwise list): torch = the tiny model (default); sim = the "
                        "population simulator, same protocol")
    p.add_argument("--sim-profile", dest="sim_profile", default="tiny",
                   help="the simulator's parameters with --engine sim (default: tiny, fitted to the tiny model)")
    p.add_argument("--out", default="bench-out")
    p.add_argument("--report-only", action="store_true", help="rebuild the report from finished runs")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every run (as in `rollwise train --set`)")
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    import signal

    from .report import markdown_table, write_report

    # SIGTERM unwinds like Ctrl-C, so run_all's cleanup stops the trainers it started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    kw = task_bench_defaults(args.task)  # e.g. a budget sized to the task's response lengths
    if args.quick:
        kw.update({k: v for k, v in QUICK.items() if k not in kw})
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
    argv = [a for a in getattr(args, "argv", sys.argv[1:]) if a != "--report-only"]  # the command that made the runs
    command = "rollwise " + " ".join(shlex.quote(a) for a in argv) if argv[:1] == ["bench"] else "rollwise bench"
    summary = write_report(cfg, command, args.target)
    for mix in cfg.mixes:
        print(f"\n## mix {mix}\n" + markdown_table(summary, mix))
    print(f"\nreport: {args.out}/report.md, {args.out}/report.html, {args.out}/summary.json")
    return 0
