"""`rollwise sim`: run a planner through the population simulator; ends with one JSON line.

    rollwise sim --prompts 1000000 --steps 1000 --batch 512 --n 16 --planner greso [--seed 0] [--clusters 16]
    rollwise sim --profile chain ...   # a named parameter set (sim/profiles.py), e.g. a task's length shape

Model and timing parameters are overridable with `--set section.key=value` (sections: population,
dynamics, timing), e.g. `--set timing.engines=4 --set dynamics.eta_cluster=0.2`.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import typing
from dataclasses import fields


def add_sim_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("sim", help="population simulator: planners on 10^5-10^7 prompts in seconds, with system timing")
    p.add_argument("--prompts", type=int, default=100_000, help="train pool size")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch", type=int, default=512, help="groups the learner wants per step (B)")
    p.add_argument("--n", type=int, default=16, help="samples per prompt")
    p.add_argument("--planner", default="uniform", help="planner spec, e.g. uniform, greso, dapo, greso+ar3po")
    p.add_argument("--planner-options", dest="planner_options", default="{}",
                   help='JSON: {"component": {kwarg: value}}')
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--clusters", type=int, default=None, help="skill clusters (default 16)")
    p.add_argument("--profile", default="default",
                   help="named population and dynamics parameters (sim/profiles.py: default, tiny, chain)")
    p.add_argument("--eval-every", dest="eval_every", type=int, default=0,
                   help="steps between held-out accuracy rows written to --rows (0: end only)")
    p.add_argument("--rows", help="write one JSON line per step to this file")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a model parameter (population.*, dynamics.*, timing.*)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=cmd_sim)
    return p


def build_config(args):
    from ..core import schema
    from ..run.config import parse_sets
    from .profiles import profile_configs
    from .runner import SimConfig

    population, dynamics, greedy_eval = profile_configs(getattr(args, "profile", "default"))
    cfg = SimConfig(prompts=args.prompts, steps=args.steps, batch=args.batch, n=args.n, planner=args.planner,
                    planner_options=json.loads(args.planner_options or "{}"), seed=args.seed,
                    eval_every=args.eval_every, keep_rows=bool(args.rows), greedy_eval=greedy_eval,
                    population=population, dynamics=dynamics)
    if args.clusters is not None:
        cfg.population.clusters = args.clusters
    for key, value in parse_sets(args.set).items():  # the same KEY=VALUE syntax as train and bench
        section, _, name = key.partition(".")
        target = getattr(cfg, section, None) if section in ("population", "dynamics", "timing") else None
        if target is None or name not in {f.name for f in fields(target)}:
            raise ValueError(f"--set {key!r}: unknown key; expected population.KEY, dynamics.KEY or timing.KEY "
                             "with a known KEY")
        hint = typing.get_type_hints(type(target))[name]
        value = schema.check(hint, value, f"--set {key}")  # its type, as every config field (core/schema.py)
        if isinstance(value, float) and not math.isfinite(value):  # NaN spreads through every figure (not JSON)
            raise ValueError(f"{key} must be a finite number, got {value}")
        setattr(target, name, value)
    return cfg


def cmd_sim(args) -> int:
    from .runner import Simulator

    cfg = build_config(args)
    sim = Simulator(cfg)
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = sim.run(log=log)
    if args.rows:
        with open(args.rows, "w") as f:
            for row in sim.rows:
                f.write(json.dumps(row, allow_nan=False) + "\n")
    print(json.dumps(out, allow_nan=False), flush=True)  # strict JSON: a non-finite figure is an error
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rollwise-sim", description=__doc__)
    add_sim_parser(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(["sim", *(sys.argv[1:] if argv is None else argv)])
    try:
        return args.func(args)
    except (ValueError, KeyError) as e:
        print(f"rollwise sim: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
