"""rollwise command line: train, eval, warmstart, export, list, compare, bench."""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import sys
from pathlib import Path


def _task_names() -> str:
    """Every registered task, for the help (read from the registry, so a new task is never left out)."""
    from .core import registry

    return ", ".join(e.name for e in registry.entries("task"))


def _train_parser(sub):
    p = sub.add_parser("train", help="train with RLVR (resumes if --out holds a checkpoint)",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=settings_help())
    p.add_argument("--config", help="YAML config file")
    p.add_argument("--model", help="local checkpoint directory (default: the embedded warm-started base)")
    p.add_argument("--steps", type=int, help=_help("steps"))
    p.add_argument("--seed", type=int, help=_help("seed"))
    p.add_argument("--out", help="run directory (metrics.jsonl, checkpoint.pt, model/)")
    p.add_argument("--planner", help="planner spec, e.g. uniform, dapo, greso+ar3po")
    p.add_argument("--advantage", help=_help("learner.advantage"))
    p.add_argument("--loss", help=_help("learner.loss"))
    p.add_argument("--loss-agg", dest="loss_agg", help=_help("learner.loss_agg"))
    p.add_argument("--correction", help=_help("learner.correction"))
    p.add_argument("--recompose", help=_help("learner.recompose"))
    p.add_argument("--task", help=f"task name ({_task_names()})")
    p.add_argument("--engine", help="engine that samples: a registered name (torch) or 'module:Class'")
    p.add_argument("--device", help="where the learner and the torch engine run: cpu (default), cuda, cuda:N, "
                   "auto (cuda if available)")
    p.add_argument("--mode", choices=["sync", "one-step-off", "async"],
                   help="async: rollout workers run ahead of the learner within --max-staleness; one-step-off: async "
                   "with max-staleness 1")
    p.add_argument("--workers", type=int, help="async: rollout workers (Ray actors); 0: one worker in this process, without Ray")
    p.add_argument("--max-staleness", type=int, dest="max_staleness",
                   help="trained tokens come from a policy at most this many updates old: async mode always "
                   "(default 1; 0 = synchronous), the sync loop only when set (it then bounds resumed partial rows)")
    p.add_argument("--reward", help="user reward 'module:function' called as fn(response, answer), or 'math' "
                   "(math-verify; reward_options.extract: auto, boxed, ####, number)")
    p.add_argument("--logger", help="comma-separated: jsonl (always on), tensorboard, wandb (offline unless "
                   "WANDB_MODE says otherwise); the last two need pip install 'rollwise[logging]'")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key, dotted for nesting (e.g. learner.lr=1e-4); YAML values")
    p.add_argument("--allow-config-change", action="store_true", dest="allow_config_change",
                   help="resume a run in --out with settings other than those it was made with (recorded in "
                        "DIR/config_changes.jsonl); without it only steps, budget and eval/checkpoint cadence "
                        "may change. A new learner.lr, betas or weight_decay goes into the optimizer; seed, model "
                        "and warmstart.* are refused (the checkpoint's state would override them)")
    return p


def _help(key: str) -> str:
    """A flag's help: the help of the config field it sets."""
    return _field_helps()[key]


@functools.lru_cache(maxsize=1)
def _field_helps() -> dict[str, str]:
    """{config key: help}, read once (the parser is built on every call of main)."""
    from .core.settings import settings
    from .run.config import Config

    return {s.key: s.help for s in settings(Config)}


@functools.lru_cache(maxsize=1)
def settings_help() -> str:
    """Every config field, as `--set` takes it, with its type, default and help (from the dataclasses)."""
    import textwrap

    from .core.settings import settings
    from .policy.warmstart import WarmStartConfig
    from .run.config import Config

    lines = ["settings: every key below is a --set KEY=VALUE (YAML value) and a key of a --config YAML file",
             "(dotted keys nest: learner.lr=3e-4 is learner: {lr: 3e-4}):", ""]
    for s in settings(Config, nested={"warmstart": WarmStartConfig}):
        lines.append(f"  {s.key} ({s.type}, default {s.default!r})")
        lines += textwrap.wrap(s.help, 100, initial_indent=" " * 6, subsequent_indent=" " * 6)
    lines += ["", "a component's own options (planner_options.NAME, task_options, learner.loss_options, ...): "
              "rollwise list --options NAME"]
    return "\n".join(lines)


def _overrides(args) -> dict:
    from .run.config import parse_sets

    ov = {}
    for key in ("model", "steps", "seed", "out", "planner", "task", "reward", "engine", "mode", "workers",
                "max_staleness", "device"):
        if getattr(args, key, None) is not None:
            ov[key] = getattr(args, key)
    if getattr(args, "logger", None) is not None:
        ov["loggers"] = [name.strip() for name in args.logger.split(",") if name.strip()]
    for key in ("advantage", "loss", "loss_agg", "correction", "recompose"):
        if getattr(args, key, None) is not None:
            ov[f"learner.{key}"] = getattr(args, key)
    ov.update(parse_sets(args.set))
    return ov


def cmd_train(args) -> int:
    from .run.config import load_config
    from .run.loop import Trainer
    from .run.rundir import check_config_out

    overrides = _overrides(args)
    cfg = load_config(args.config, overrides)
    check_config_out(args.config, overrides, cfg.out)
    from .run.progress import console

    rows = Trainer(cfg, allow_config_change=args.allow_config_change).run()
    evals = [r for r in rows if "eval_acc" in r]
    if evals:  # (the run's learning verdict, said just before, tells whether this change is beyond noise)
        first, last = evals[0], evals[-1]
        # planners spend different compute per token (issue 48 reports AR3PO at ~1.45x GRPO's): name the unit
        compute = (f", {last['compute']:.4g} compute units (compare planners at equal budget_compute, or "
                   f"rollwise compare --x compute)") if isinstance(last.get("compute"), (int, float)) else ""
        console().info(f"held-out accuracy {first['eval_acc']:.3f} (step {first['step']}) -> {last['eval_acc']:.3f} "
                       f"(step {last['step']}), {last.get('tokens', 0)} generated tokens{compute}; metrics in "
                       f"{cfg.out}/metrics.jsonl")
    return 0


def cmd_eval(args) -> int:
    from .core import registry
    from .policy.warmstart import base_checkpoint
    from .run.config import load_config
    from .run.evaluate import check_finite_weights, evaluate
    from .run.build import load_policy, reward_scorer
    from .run.progress import Heartbeat
    from .core.task import declares

    for name, least in (("size", 0), ("k", 0), ("samples", 0)):
        if getattr(args, name) < least:
            raise ValueError(f"--{name} must be >= {least}, got {getattr(args, name)}")
    if args.samples and args.samples < args.k:
        raise ValueError(f"--samples must be >= --k ({args.k}), got {args.samples}")
    cfg = load_config(args.config, _overrides(args))
    task = registry.get("task", cfg.task).obj(**cfg.task_options)
    path = args.model or cfg.model or base_checkpoint(task, cfg.warmstart)
    policy = load_policy(path)
    policy.model.eval()
    if declares(task, "use_tokenizer"):  # a chat model's template, as in training
        task.use_tokenizer(policy.tokenizer)
    try:
        check_finite_weights(policy)
    except ValueError as e:
        raise ValueError(f"--model {path}: {e}") from None
    heldout = task.heldout()[: args.size or None]
    scorer = reward_scorer(cfg, task)  # the run's --reward (e.g. math), as in training
    try:
        with Heartbeat("eval", lambda: f"evaluating {len(heldout)} held-out prompts"):
            out = evaluate(policy, heldout, scorer, None, cfg.max_new_tokens, args.k, args.samples, cfg.temperature,
                           seed=cfg.seed)
    finally:
        scorer.close()
    if scorer.errors:  # failed calls score 0: an accuracy made of them is not the model's
        why = f"the reward function failed on {scorer.errors} of {scorer.scored} responses (last error: " \
              f"{scorer.last_error})"
        if scorer.errors == scorer.scored:
            raise ValueError(f"{why}; no accuracy to report")
        print(f"warning: {why}; they score 0", file=sys.stderr)
    print(json.dumps({"model": str(path), "prompts": len(heldout), **out, "reward_errors": scorer.errors}))
    return 0


def cmd_warmstart(args) -> int:
    """Build (or find) the base checkpoint of a task's warm start and print its report."""
    from .core import registry
    from .core.task import declares
    from .policy.warmstart import base_checkpoint, build_base, fingerprint, shipped_base
    from .run.config import load_config

    cfg = load_config(args.config, _overrides(args))
    task = registry.get("task", cfg.task).obj(**cfg.task_options)
    if not declares(task, "sft_examples"):
        raise ValueError(f"task {cfg.task!r} has no supervised examples (sft_examples) to warm-start from")
    if args.out:
        out = Path(args.out)
        if out.exists() and any(out.iterdir()):
            raise ValueError(f"--out {out}: exists and is not empty (rollwise never overwrites a directory)")
        out.mkdir(parents=True, exist_ok=True)
        build_base(task, cfg.warmstart, out, command="rollwise " + " ".join(args.argv))
        path = out
    else:
        path = base_checkpoint(task, cfg.warmstart)
    report = json.loads((Path(path) / "report.json").read_text())
    shipped = shipped_base(fingerprint(task, cfg.warmstart)) is not None
    print(json.dumps({"base": str(path), "shipped": shipped, **{k: v for k, v in report.items() if k != "config"}}))
    return 0


def cmd_export(args) -> int:
    """Write a checkpoint (or a run's latest policy) as a Hugging Face checkpoint directory."""
    from .policy.export import export_checkpoint

    out = export_checkpoint(args.model, args.out, adapter=args.adapter)
    how = "peft.PeftModel.from_pretrained(base, DIR)" if args.adapter else "AutoModelForCausalLM.from_pretrained"
    print(f"exported {args.model} -> {out} (loads with {how})")
    return 0


def cmd_list(args) -> int:
    from .core import registry

    if args.options:  # one component in full: options, types, defaults, paper
        from .core.describe import describe, find

        print("\n\n".join(describe(e) for e in find(args.options, args.kind)))
        return 0
    if args.kind:
        raise ValueError("--kind selects among components of one name: use it with --options NAME")
    for kind in registry.KINDS:
        entries = registry.entries(kind)
        print(f"{kind} ({len(entries)})")
        for e in entries:
            print(f"  {e.name:<26} [{e.provenance}]  {e.summary}")
    print("\nprovenance: CODE = rule read from the official code, ABS = paper abstract, "
          "SEC = secondary summary, INF = inferred by rollwise (not paper-verified)")
    return 0


def die_with_parent() -> None:
    """A trainer started by `rollwise bench` (ROLLWISE_PARENT_PID set) ends when the bench ends, even by
    SIGKILL, which no cleanup code in the bench sees: Linux PR_SET_PDEATHSIG, set by the trainer itself
    (setting it between fork and exec is unsafe in a threaded parent), then a check that the bench did
    not die before it was set."""
    parent = os.environ.get("ROLLWISE_PARENT_PID")
    if not parent or not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):
        sys.exit("rollwise: error: the bench that started this run has ended")


# ---- --trust-code: the user, on the command line, trusts code a data file names (core/trust.py) -------------

def _add_trust_flag(p) -> None:
    p.add_argument("--trust-code", action="append", dest="trust_code", metavar="MODULE",
                   help="let a config or plan name code from MODULE (a package of the standard library or "
                        "site-packages, e.g. an installed plugin); without it, code named by a data file must be "
                        "your own module (docs/robustness.md). Repeatable")


@contextlib.contextmanager
def _trusting(modules: list[str]):
    """ROLLWISE_TRUST_CODE extended by `modules` while the command runs: the processes it starts (a bench's
    runs) inherit it; the caller's environment is restored after (main may run in-process, e.g. in tests)."""
    from .core.trust import TRUST_ENV

    old = os.environ.get(TRUST_ENV)
    if modules:
        os.environ[TRUST_ENV] = ",".join([*(old.split(",") if old else []), *modules])
    try:
        yield
    finally:
        if modules:
            if old is None:
                os.environ.pop(TRUST_ENV, None)
            else:
                os.environ[TRUST_ENV] = old


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rollwise", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    _train_parser(sub)
    pe = sub.add_parser("eval", help="held-out accuracy (and pass@k) of a checkpoint")
    pe.add_argument("--config")
    pe.add_argument("--model")
    pe.add_argument("--size", type=int, default=0, help="held-out prompts (0 = all)")
    pe.add_argument("--k", type=int, default=0, help="pass@k (0 = off)")
    pe.add_argument("--samples", type=int, default=0, help="samples per prompt at the run's temperature: their mean accuracy, and pass@k from them")
    pe.add_argument("--reward", help="score with this reward ('module:function' or 'math'), as a run does")
    pe.add_argument("--set", action="append", default=[])
    pw = sub.add_parser("warmstart", help="build a task's base checkpoint by a supervised warm start "
                                         "(the embedded default's ships with rollwise)")
    pw.add_argument("--config")
    pw.add_argument("--task")
    pw.add_argument("--out", help="write the base here (default: the cache, or the shipped base if it matches)")
    pw.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="e.g. warmstart.steps=600, task_options.seed=1")
    px = sub.add_parser("export", help="write a checkpoint or a run's trained policy as a Hugging Face "
                                      "checkpoint (AutoModelForCausalLM.from_pretrained loads it)")
    px.add_argument("--model", required=True, help="a checkpoint directory, or a run directory (uses DIR/model)")
    px.add_argument("--out", required=True, help="a new (or empty) directory")
    px.add_argument("--adapter", action="store_true", help="a LoRA run: write its adapter (peft format), not the "
                                                             "merged model")
    pl = sub.add_parser("list", help="every registered component, by kind, with provenance")
    pl.add_argument("--options", metavar="NAME", help="one component's options (types, defaults) and its paper")
    pl.add_argument("--kind", help="with --options: the kind, where a name has several (e.g. gpg: advantage, loss)")
    from .bench.cli import add_bench_parser
    add_bench_parser(sub)
    from .systems.cli import add_systems_parser
    add_systems_parser(sub)
    from .run.compare import add_compare_parser  # rollwise compare RUN_A RUN_B [...]
    add_compare_parser(sub)
    try:  # the simulator registers its own subcommand
        from .sim.cli import add_sim_parser
    except ImportError:
        add_sim_parser = None
    if add_sim_parser is not None:
        add_sim_parser(sub)
    for p in sub.choices.values():  # every command may import code that a config or plan names
        _add_trust_flag(p)
    args = parser.parse_args(argv)
    die_with_parent()
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the command as given (reports record it)
    from .bench.runner import BenchFailed
    from .run.loop import RunStopped

    try:
        with _trusting(getattr(args, "trust_code", None) or []):
            return {"train": cmd_train, "eval": cmd_eval, "list": cmd_list, "warmstart": cmd_warmstart,
                    "export": cmd_export}.get(args.cmd, getattr(args, "func", None))(args)
    except (ValueError, OSError, KeyError, RunStopped, BenchFailed) as e:
        # bad input, a file that cannot be read or written, or a run that stopped for a stated reason: one
        # line, no traceback (a genuine bug raises something else and keeps its traceback)
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"rollwise: error: {' '.join(str(msg).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rollwise: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
