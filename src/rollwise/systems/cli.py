"""`rollwise systems predict DEPLOYMENT.yaml`: the step-time model on a deployment written as a file
(systems/deployment.py says the file's fields); `rollwise systems validate FOLDER`: the table of published
figures against the model's predictions (systems/validate.py)."""
from __future__ import annotations

from pathlib import Path

from .deployment import load_deployment


def sensitivity_table(dep, modes) -> str:
    """Each assumed profile value at x0.5 and x2: every mode's step seconds and its speed-up over the first mode."""
    from dataclasses import replace
    profile = dep.profile
    lines = [f"sensitivity (x0.5 / x2 of each assumed value): {' | '.join(modes)} step s, speed-up vs {modes[0]}"]
    for name in profile.assumptions:
        for factor in (0.5, 2.0):
            v = getattr(profile, name) * factor
            if isinstance(getattr(profile, name), int):
                v = max(1, int(round(v)))
            p = replace(profile, **{name: v})
            if name in ("gen_gpus", "tp") and (p.gen_gpus >= p.gpus or p.tp > p.gpus):
                lines.append(f"  {name} x{factor:g}: not a valid split")
                continue
            steps = [dep.predict(m, p).step_s for m in modes]
            cells = " | ".join(f"{s:.1f} ({steps[0] / s:.2f}x)" for s in steps)
            lines.append(f"  {name} x{factor:g}: {cells}")
    return "\n".join(lines)


def cmd_predict(args) -> int:
    dep = load_deployment(Path(args.deployment))
    profile, modes, work, published = dep.profile, dep.modes, dep.work, dep.published
    print(f"profile {profile.name}: {profile.gpus} GPUs, {work.rounds[0].lengths.size} rows, "
          f"mean length {work.rounds[0].lengths.mean():.0f}")
    print(f"{'mode':<16}{'step s':>10}{'generation':>12}{'training':>10}{'sync':>7}{'idle':>8}")
    base = None
    for m in modes:
        t = dep.predict(m)
        base = base or t.step_s
        print(f"{m:<16}{t.step_s:>10.1f}{t.generation_s:>12.1f}{t.training_s:>10.1f}{t.sync_s:>7.1f}"
              f"{t.idle_s:>8.1f}   {base / t.step_s:.2f}x vs {modes[0]}")
    if profile.assumptions:
        print(f"assumed (no source): {', '.join(profile.assumptions)}")
        if args.sensitivity:
            print(sensitivity_table(dep, modes))
    if dep.assumed:
        print(f"assumed deployment inputs: {', '.join(dep.assumed)}")
    if isinstance(published, str):
        print(f"published: {published}")
    elif published:
        for f in published:
            p = dep.predicted(f)
            print(f"published: {f.figure}: {f.value_text()} ({f.source}); predicted {p:.2f} ({f.error(p):+.0%})")
    return 0


def cmd_validate(args) -> int:
    from .validate import markdown, rows
    print(markdown(rows(args.folder, with_sensitivity=not args.no_sensitivity)))
    return 0


def add_systems_parser(sub) -> None:
    ps = sub.add_parser("systems", help="the step-time model: seconds per step on a cluster profile")
    ss = ps.add_subparsers(dest="systems_cmd", required=True)
    pp = ss.add_parser("predict", help="predicted step time of each deployment mode for a deployment file")
    pp.add_argument("deployment", help="a deployment YAML file (profile, prompts, n, lengths, modes)")
    pp.add_argument("--sensitivity", action="store_true", help="also each assumed profile value at x0.5 and x2")
    pp.set_defaults(func=cmd_predict)
    pv = ss.add_parser("validate", help="published figures against the model: a markdown table, one row per figure")
    pv.add_argument("folder", nargs="?", default="benchmarks/systems", help="a folder of deployment YAML files")
    pv.add_argument("--no-sensitivity", action="store_true", help="leave out each assumption at x0.5 and x2 (faster)")
    pv.set_defaults(func=cmd_validate)
