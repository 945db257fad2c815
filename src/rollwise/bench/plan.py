"""A bench plan: everything a comparison decides before its first run, in one YAML file.

`rollwise bench --plan PLAN.yaml --out DIR` runs it. The plan names the arms (one is the baseline, tuned
GRPO), the seeds, the data seed, the budget, the evaluation and which figure is primary, the family of
arms the Holm correction runs over, and the decision rule. Before the first run the plan's exact bytes
and their sha256 are written into DIR (`plan.yaml`, `plan.sha256`, `plan_record.json` with the git
commit); a later call on DIR with a plan whose hash differs is refused, so what was decided cannot
move after the results are seen. Nothing recorded is overwritten. The format, field by field, is in
docs/bench3.md; benchmarks/plans/example_task1.yaml is an example.

Each arm runs as its own equal-budget bench (runner.py) in DIR/arms/ARM, so finished runs are reused
and unfinished ones resume exactly as in `rollwise bench`. An A/A plan (GRPO against GRPO) gives the
second arm a `seed_offset`: its seed s + offset is paired with the baseline's seed s.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from ..core import schema, trust
from ..core.schema import SEED, Float, Int, Rule, at_least, checked, finite, one_of
from .environment import environment
from .runner import BenchConfig, safe_name

KINDS = ("exploratory", "confirmatory")
PRIMARY = ("greedy", "pass@k", "sampled")
SPLITS = ("test", "validation")
KIND_SPLIT = {"exploratory": "validation", "confirmatory": "test"}
DECIDE_ON = ("seeds", "two-way")  # tuning reads validation, reports read test
# run settings an arm may not override: they are what makes the arms comparable
PLAN_KEYS = ("planner", "seed", "task", "steps", "budget_tokens", "budget_compute", "budget_seconds", "cost_profile", "eval_every",
             "eval_every_tokens", "eval_every_compute", "eval_size", "eval_k", "eval_samples", "budget_gpu_seconds",
             "eval_every_gpu_seconds", "cluster_profile", "length_scale")
REQUIRED = ("name", "kind", "task", "data_seed", "baseline", "arms", "seeds", "budget", "evaluation", "family",
            "decision")
# Upper bounds on a plan's sizes, far above any real plan: a typo (count: 1000000000) is refused up front
# instead of making `--dry-run` enumerate a billion runs or build a task of a billion prompts.
MAX_SEEDS = 1000
MAX_SIZE = {"pool_size": 1_000_000, "evaluation.size": 1_000_000, "evaluation.evaluations": 1000,
            "evaluation.k": 1024, "evaluation.samples": 1024, "budget.tokens": 10 ** 12,
            "budget.compute_units": 1e15, "budget.wall_seconds": 1e7, "budget.gpu_seconds": 1e12,
            "budget.length_scale": 1e6}


class PlanError(ValueError):
    """A plan file that cannot be run; the message names the file and the field."""


@dataclass(frozen=True)
class Arm:
    name: str
    planner: str  # a planner spec: components joined by '+'
    settings: dict = field(default_factory=dict)  # config overrides, as `--set KEY=VALUE`
    seed_offset: int = 0  # run seed = plan seed + offset (A/A: a second GRPO under other seed labels)
    # other arms it is also compared with, described and never decided (WAVE3: an arm that trains more
    # rows per group than the baseline's n is also compared with GRPO at the nearest n)
    also_against: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    name: str
    kind: str
    task: str
    data_seed: int
    baseline: str
    arms: dict[str, Arm]
    seeds: list[int]
    budget_compute: float  # compute units under `profile`: where figures are read (bench/costs.py)
    profile: str
    budget_tokens: int  # a cap on generated tokens (the compute budget ends runs; the simulator's end here)
    split: str
    eval_size: int
    evaluations: int  # evaluations per run, evenly spaced in compute units (tokens on the simulator)
    eval_k: int
    eval_samples: int
    primary: str
    family: list[str]
    alpha: float
    goal_ratio: float
    chosen_from: str | None = None
    engine: str = "torch"
    sim_profile: str = "tiny"
    pool_size: int = 300
    options: dict = field(default_factory=dict)  # the plan's `task_options` block: the task of every arm
    replication: str | None = None  # why a confirmatory plan re-reads a test split an earlier record read
    # a wall-clock plan's cap on each run's training seconds (0: none); such a plan runs one run at a time
    budget_seconds: float = 0.0
    decide_on: str = "seeds"  # DecisionFile.interval: what a verdict needs besides Holm's p
    # Bench 4.0: each run's cap on modelled GPU-seconds under `cluster` (0: none), every response length x
    # `length_scale`; when set, evaluations are evenly spaced in GPU-seconds instead of compute units
    budget_gpu_seconds: float = 0.0
    cluster: str | None = None
    length_scale: float = 0.0

    @property
    def wall_clock(self) -> bool:
        """A plan whose figures are read on the wall clock: it ends runs on wall seconds, so its runs go one at
        a time (WAVE4: nothing else heavy on the machine while a wall-clock plan runs)."""
        return self.budget_seconds > 0

    def metric(self) -> str:
        """The metrics-row field the primary figure reads (run/evaluate.py writes them)."""
        return {"greedy": "eval_acc", "pass@k": f"eval_pass@{self.eval_k}",
                "sampled": f"eval_sampled_acc@{self.samples_per_prompt()}"}[self.primary]

    def samples_per_prompt(self) -> int:
        """Samples per held-out prompt at the training temperature (0: greedy only): pass@k reads k of them."""
        return max(self.eval_samples, self.eval_k)

    def run_seeds(self, arm: str) -> list[int]:
        return [s + self.arms[arm].seed_offset for s in self.seeds]


# ---------------------------------------------------------------------------------------------------
# Reading a plan: the file's shape (types, ranges, unknown keys) is declared here and checked by pydantic
# (core/schema.py), then parse_plan checks what joins fields (the baseline is an arm, the family, the seeds
# a confirmatory plan needs) and what needs the registry.

NAME = Rule(lambda v: re.fullmatch(r"[A-Za-z0-9._-]+", v) is not None, "letters, digits, '.', '_' or '-'")


def _at_most(bound) -> Rule:
    return Rule(lambda v: v <= bound, f"<= {bound:g}")


@checked
@dataclass
class SeedRange:
    start: Annotated[Int, at_least(0)]
    count: Annotated[Int, Rule(lambda v: 1 <= v <= MAX_SEEDS, f"in 1..{MAX_SEEDS}")]


@checked
@dataclass
class ArmFile:
    planner: str
    set: dict[str, Any] = field(default_factory=dict)  # config overrides, as `--set KEY=VALUE`
    seed_offset: Annotated[Int, Rule(lambda v: abs(v) < 2 ** 62, "within ±2**62")] = 0
    also_against: list[str] = field(default_factory=list)


@checked
@dataclass
class BudgetFile:
    compute_units: Annotated[Float, finite(0, strict=True), _at_most(MAX_SIZE["budget.compute_units"])]
    tokens: Annotated[Int, at_least(1), _at_most(MAX_SIZE["budget.tokens"])]
    profile: str
    wall_seconds: Annotated[Float, finite(0, note="0: no wall-clock cap"), _at_most(MAX_SIZE["budget.wall_seconds"])] = 0.0
    # modelled GPU-seconds (issue 41): the budget, the cluster profile they are modelled on, and the fixed factor
    # every response length is scaled by (docs/bench3.md "Ending runs on modelled GPU-seconds")
    gpu_seconds: Annotated[Float, finite(0, strict=True), _at_most(MAX_SIZE["budget.gpu_seconds"])] | None = None
    cluster: str | None = None
    length_scale: Annotated[Float, finite(0, strict=True), _at_most(MAX_SIZE["budget.length_scale"])] | None = None


@checked
@dataclass
class EvaluationFile:
    primary: Annotated[str, one_of(*PRIMARY)]
    split: Annotated[str, one_of(*SPLITS)] | None = None  # None: the kind's split (KIND_SPLIT)
    size: Annotated[Int, at_least(1), _at_most(MAX_SIZE["evaluation.size"])] = 1000
    evaluations: Annotated[Int, at_least(1), _at_most(MAX_SIZE["evaluation.evaluations"])] = 6
    k: Annotated[Int, at_least(0), _at_most(MAX_SIZE["evaluation.k"])] = 0
    samples: Annotated[Int, at_least(0), _at_most(MAX_SIZE["evaluation.samples"])] = 0


@checked
@dataclass
class DecisionFile:
    alpha: Annotated[Float, Rule(lambda v: 0 < v < 1, "in (0, 1)")]
    goal_ratio: Annotated[Float, finite(0, strict=True)] = 3.0
    # seeds: the exact sign-flip test over seeds decides (Bench 3.0); two-way: it must pass AND the interval that
    # resamples held-out prompts as well as seeds must exclude 0 (issue 47: a verdict that holds for new prompts)
    interval: Annotated[str, one_of(*DECIDE_ON)] = "seeds"


@checked
@dataclass
class PlanFile:
    """A plan file, field by field (docs/bench3.md)."""
    name: Annotated[str, NAME]
    kind: Annotated[str, one_of(*KINDS)]
    task: str
    data_seed: Annotated[Int, SEED]
    baseline: str
    arms: dict[Annotated[str, NAME], ArmFile]
    seeds: list[Int] | SeedRange
    budget: BudgetFile
    evaluation: EvaluationFile
    family: list[str]
    decision: DecisionFile
    task_options: dict[str, Any] = field(default_factory=dict)
    chosen_from: str | None = None
    replication: str | None = None
    engine: str = "torch"
    sim_profile: str = "tiny"
    pool_size: Annotated[Int, at_least(1), _at_most(MAX_SIZE["pool_size"])] = 300
    notes: str | None = None


def _without_nulls(doc: dict) -> dict:
    """An empty YAML field (`chosen_from:`) is an absent one, at the top and in the plan's own sections (not
    inside `set` or `task_options`, where null is a value)."""
    out = {k: v for k, v in doc.items() if v is not None}
    for key in ("budget", "evaluation", "decision"):
        if isinstance(out.get(key), dict):
            out[key] = {k: v for k, v in out[key].items() if v is not None}
    if isinstance(out.get("arms"), dict):
        out["arms"] = {a: ({k: v for k, v in arm.items() if v is not None} if isinstance(arm, dict) else arm)
                       for a, arm in out["arms"].items()}
    return out


def _check_planner(spec: str, where: str) -> None:
    from ..core import registry

    if ":" in spec:  # an import path would run code named by a data file
        raise PlanError(f"{where}: planner {spec!r}: a plan names registered planners only, not import paths")
    for comp in spec.split("+"):
        try:
            registry.get("planner", comp)
        except ValueError as e:
            raise PlanError(f"{where}: {e}") from None


def _seeds(v: list[int] | SeedRange, where: str) -> list[int]:
    seeds = list(range(v.start, v.start + v.count)) if isinstance(v, SeedRange) else list(v)
    if len(seeds) > MAX_SEEDS:
        raise PlanError(f"{where}: field 'seeds' lists {len(seeds)} seeds; at most {MAX_SEEDS}")
    if seeds and max(seeds) >= 2 ** 62:  # a run seed is < 2**63 (run/config.py), offsets included
        raise PlanError(f"{where}: field 'seeds' must be < 2**62, got {max(seeds)}")
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise PlanError(f"{where}: field 'seeds' must be distinct integers >= 0, at least one")
    return seeds


def _base_settings(settings: dict) -> dict:
    """The settings of an arm that choose its base: `model` and the warm start's (`warmstart.KEY`, or a
    `warmstart` mapping), flattened."""
    out = {k: v for k, v in settings.items() if k == "model" or k.startswith("warmstart.")}
    if isinstance(settings.get("warmstart"), dict):
        out.update({f"warmstart.{k}": v for k, v in settings["warmstart"].items()})
    return out


def _one_base(arms: dict, baseline: str, where: str) -> None:
    """Every arm starts from the baseline's base: an arm that left out the `model` the others name (or set
    another warm start) trained from another base, built on the fly, and the plan compared the bases."""
    def said(v):
        return "not set" if v is None else repr(v)

    want = _base_settings(arms[baseline].settings)
    for a in arms.values():
        have = _base_settings(a.settings)
        if have != want:
            key = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))[0]
            raise PlanError(f"{where}: arms.{a.name}: set: {key} is {said(have.get(key))} but "
                            f"{said(want.get(key))} in the baseline {baseline!r}: every arm must start "
                            "from the same base (the same model and warmstart settings), or the plan compares bases")


def parse_plan(text: str, where: str = "plan") -> Plan:
    """A Plan from YAML text (yaml.safe_load: no code runs), every field checked; a bad plan raises
    PlanError with one line naming the file and the field."""
    from ..core import registry
    from .costs import yaml_mapping
    from .stats import EXACT_MAX_SEEDS, min_seeds_for_family

    doc = yaml_mapping(text, where, f"of plan fields ({', '.join(REQUIRED)})", PlanError)
    try:
        f = schema.build(PlanFile, _without_nulls(doc), where, prefix=True)
    except ValueError as e:
        raise PlanError(str(e)) from None
    try:
        registry.get("task", f.task)
    except ValueError as e:
        raise PlanError(f"{where}: task: {e}") from None
    for key in ("data_seed", "split"):
        if key in f.task_options:
            raise PlanError(f"{where}: task_options: {key!r} is set by the plan's own fields (data_seed, "
                            "evaluation.split), not in task_options")
    if len(f.arms) < 2:
        raise PlanError(f"{where}: field 'arms' needs the baseline and at least one other arm")
    arms = {}
    for arm_name, a in f.arms.items():
        aw = f"{where}: arms.{arm_name}"
        _check_planner(a.planner, aw)
        try:  # code a run would import: the user's own only (core/trust.py), refused before anything is recorded
            trust.check_settings(a.set, f"{aw}: set")
        except ValueError as e:
            raise PlanError(str(e)) from None
        for key in a.set:
            if key in PLAN_KEYS:
                raise PlanError(f"{aw}: set: {key!r} is the plan's to set (its budget, evaluation, seeds, task "
                                "and data split are the same for every arm)")
            if key == "task_options" or key.startswith("task_options."):  # the task is the plan's, not an arm's
                raise PlanError(f"{aw}: set: {key!r}: an arm may not change the task; task options go in the "
                                "plan's top-level `task_options` block, the same for every arm")
        arms[arm_name] = Arm(arm_name, a.planner, dict(a.set), a.seed_offset, tuple(a.also_against))
    baseline = f.baseline
    if baseline not in arms:
        raise PlanError(f"{where}: baseline {baseline!r} is not among the arms ({', '.join(arms)})")
    for a in arms.values():
        for other in a.also_against:
            if other not in arms or other in (a.name, baseline):
                raise PlanError(f"{where}: arms.{a.name}: also_against {other!r} must be another arm, not the baseline "
                                f"(arms: {', '.join(arms)})")
    _one_base(arms, baseline, where)
    seeds = _seeds(f.seeds, where)
    runs = {}
    for a in arms.values():  # two arms on the same planner and seeds would be the same runs
        for s in seeds:
            key = (a.planner, json.dumps(a.settings, sort_keys=True), s + a.seed_offset)
            if key in runs:
                raise PlanError(f"{where}: arms {runs[key]} and {a.name} would run the same runs (seed {s + a.seed_offset}); "
                                "give one a seed_offset (an A/A plan) or other settings")
            runs[key] = a.name
        if min(seeds) + a.seed_offset < 0:
            raise PlanError(f"{where}: arms.{a.name}: seed_offset makes a seed negative")

    from .costs import load_profile

    try:
        load_profile(f.budget.profile)
    except ValueError as e:
        raise PlanError(f"{where}: budget: {e}") from None
    _check_gpu_budget(f.budget, f.engine, where)

    ev, ew = f.evaluation, f"{where}: evaluation"
    split = ev.split or KIND_SPLIT[f.kind]
    if ev.primary == "pass@k" and ev.k < 1:
        raise PlanError(f"{ew}: primary pass@k needs k >= 1")
    if ev.primary == "sampled" and max(ev.k, ev.samples) < 1:
        raise PlanError(f"{ew}: primary 'sampled' (the mean accuracy of samples at the training temperature) "
                        "needs samples >= 1")
    if ev.samples and ev.samples < ev.k:
        raise PlanError(f"{ew}: samples must be >= k")

    family = f.family
    for a in family:
        if a not in arms:
            raise PlanError(f"{where}: family member {a!r} is not among the arms ({', '.join(arms)})")
        if a == baseline:
            raise PlanError(f"{where}: family member {a!r} is the baseline; the family holds the arms tested against it")
    if not family or len(set(family)) != len(family):
        raise PlanError(f"{where}: field 'family' must list distinct non-baseline arms, at least one")
    alpha = f.decision.alpha
    if f.kind == "confirmatory" and not f.chosen_from:
        raise PlanError(f"{where}: a confirmatory plan cites the validation results its choices come from "
                        "(field 'chosen_from')")
    if f.kind == "confirmatory" and not min_seeds_for_family(len(family), alpha) <= len(seeds) <= EXACT_MAX_SEEDS:
        raise PlanError(f"{where}: a confirmatory plan with a family of {len(family)} at alpha {alpha:g} needs "
                        f"{min_seeds_for_family(len(family), alpha)}..{EXACT_MAX_SEEDS} seeds (the exact sign-flip "
                        f"test's smallest p is 2/2^k), got {len(seeds)}")
    if split != KIND_SPLIT[f.kind]:
        raise PlanError(f"{where}: evaluation: a plan of kind {f.kind} reads the {KIND_SPLIT[f.kind]} split, not "
                        f"{split} (tuning and exploration read validation; reported figures read test)")
    try:
        registry.get("engine", f.engine)
    except ValueError as e:
        raise PlanError(f"{where}: engine: {e}") from None
    b = f.budget
    gpu = {} if b.gpu_seconds is None else {"budget_gpu_seconds": float(b.gpu_seconds), "cluster": b.cluster,
                                            "length_scale": float(b.length_scale)}
    return Plan(f.name, f.kind, f.task, f.data_seed, baseline, arms, seeds, float(b.compute_units), b.profile,
                b.tokens, split, ev.size, ev.evaluations, ev.k, ev.samples, ev.primary, list(family), float(alpha),
                float(f.decision.goal_ratio), f.chosen_from, f.engine, f.sim_profile, f.pool_size,
                dict(f.task_options), f.replication, float(b.wall_seconds), f.decision.interval, **gpu)


def _check_gpu_budget(b: BudgetFile, engine: str, where: str) -> None:
    """budget.gpu_seconds comes with its cluster profile and its length scale, each named by the error that
    lacks it; the two are read only with it."""
    bw = f"{where}: budget"
    if b.gpu_seconds is None:
        for key in ("cluster", "length_scale"):
            if getattr(b, key) is not None:
                raise PlanError(f"{bw}.{key}: read only with budget.gpu_seconds (a budget on modelled GPU-seconds)")
        return
    if engine == "sim":
        raise PlanError(f"{bw}.gpu_seconds: the simulator's rows carry no response lengths to model GPU-seconds "
                        "from (engine: sim ends runs on budget.tokens)")
    if b.cluster is None:
        from ..systems.profile import SHIPPED

        raise PlanError(f"{bw}.gpu_seconds needs budget.cluster, the cluster profile they are modelled on (shipped: "
                        f"{', '.join(sorted(p.stem for p in SHIPPED.glob('*.yaml')))})")
    if b.length_scale is None:
        raise PlanError(f"{bw}.gpu_seconds needs budget.length_scale, the factor every response length is scaled "
                        "by (the cluster's mean generation length over the task's under the baseline at step 1), "
                        "fixed in the plan before any run")
    from ..systems.profile import load_profile as load_cluster

    try:
        load_cluster(b.cluster)
    except ValueError as e:
        raise PlanError(f"{bw}.cluster: {' '.join(str(e).split())}") from None


def load_plan(path: str | Path) -> tuple[Plan, bytes]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise PlanError(f"plan {p}: cannot read it ({e.strerror or e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise PlanError(f"plan {p}: not UTF-8 text") from None
    return parse_plan(text, f"plan {p}"), raw


# ---------------------------------------------------------------------------------------------------
# From a plan to benches


def task_options(plan: Plan) -> dict:
    """The task options a plan adds to every run: its `task_options` block, and `data_seed` and `split`
    where the task takes them. A task without data splits yet runs its one held-out set; that is allowed
    only at data_seed 0 and stated in the record (data_split_note)."""
    import inspect

    from ..core import registry

    params = inspect.signature(registry.get("task", plan.task).obj).parameters
    out = dict(plan.options)
    if "data_seed" in params:
        out["data_seed"] = plan.data_seed
    elif plan.data_seed != 0:
        raise PlanError(f"task {plan.task!r} has no data splits by data seed yet (no `data_seed` option): "
                        f"use data_seed: 0 until it has")
    if "split" in params:
        out["split"] = plan.split
    return out


def data_split_note(plan: Plan) -> str:
    opts = task_options(plan)
    if "data_seed" in opts and "split" in opts:
        return f"data seed {plan.data_seed}, {plan.split} split"
    return (f"data seed {plan.data_seed} (recorded; task {plan.task!r} has no train/validation/test splits by data "
            f"seed yet, so evaluations read its one held-out set, not a separate {plan.split} split)")


def arm_config(plan: Plan, arm: str, out: Path, jobs: int = 2) -> BenchConfig:
    """The equal-budget bench of one arm: its planner and settings on the plan's seeds (+ its offset)."""
    a = plan.arms[arm]
    extra = dict(a.settings)
    if plan.budget_seconds:
        extra["budget_seconds"] = plan.budget_seconds
    if plan.engine != "sim":
        if plan.eval_k:
            extra.setdefault("eval_k", plan.eval_k)
        if plan.eval_samples:
            extra.setdefault("eval_samples", plan.eval_samples)
    seeds = plan.run_seeds(arm)
    return BenchConfig(out=str(out / "arms" / safe_name(arm)), planners=[a.planner], mixes=["default"],
                       seeds=len(seeds), seed_values=seeds, budget_tokens=plan.budget_tokens, jobs=jobs,
                       eval_tokens=max(plan.budget_tokens // plan.evaluations, 1), eval_size=plan.eval_size,
                       # WAVE3: the compute budget ends a run, evaluated at every 1/evaluations of it; the
                       # simulator counts tokens only, so its runs keep the token budget
                       **({} if plan.engine == "sim" else
                          {"budget_compute": plan.budget_compute, "cost_profile": plan.profile,
                           "eval_compute": plan.budget_compute / plan.evaluations}),
                       # issue 41: or on modelled GPU-seconds, evaluated at every 1/evaluations of them instead
                       **({} if not plan.budget_gpu_seconds else
                          {"budget_gpu_seconds": plan.budget_gpu_seconds, "cluster_profile": plan.cluster,
                           "length_scale": plan.length_scale,
                           "eval_gpu_seconds": plan.budget_gpu_seconds / plan.evaluations}),
                       pool_size=plan.pool_size, extra=extra, engine=plan.engine, sim_profile=plan.sim_profile,
                       task=plan.task, task_options=task_options(plan))


# ---------------------------------------------------------------------------------------------------
# The record: the plan is fixed before the first run


def sha256(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def git_state(path: Path) -> dict:
    """The commit of the repository holding the plan file, and whether the file is committed unchanged
    there ({} outside a git work tree)."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=path.parent, capture_output=True, text=True, timeout=30)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {}
        tracked = git("ls-files", "--error-unmatch", path.name).returncode == 0
        clean = tracked and git("diff", "--quiet", "HEAD", "--", path.name).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"commit": head.stdout.strip(), "plan_committed": bool(clean)}


def recorded_digest(out: Path) -> str | None:
    """The sha256 recorded in `out/plan.sha256` (None if there is none); a file that does not hold one
    (empty, cut short, edited) is one line naming it: the directory's plan can no longer be checked."""
    have = Path(out) / "plan.sha256"
    if not have.exists():
        return None
    try:
        words = have.read_bytes().decode("ascii").split()
    except (OSError, UnicodeDecodeError):
        words = []
    if not words or not re.fullmatch(r"[0-9a-f]{64}", words[0]):
        raise PlanError(f"{have}: does not hold a sha256 (empty or damaged); the plan recorded in {out} cannot "
                        "be checked: restore the file, or start the plan in a new --out")
    return words[0]


def check_plan(plan: Plan, plan_path: Path | str) -> dict[str, BenchConfig]:
    """Every arm's bench, built and checked as its runs will be, before anything is written: the task
    built with the plan's task options (a misspelled dataset fails here), each arm's settings loaded as
    a run's config (torch engines) or as the simulator's (sim). One PlanError line naming the arm."""
    from ..core import registry

    from .runner import pool_options

    configs = {a: arm_config(plan, a, Path("."), 2) for a in plan.arms}  # bad task options fail here
    first = next(iter(configs.values()))
    try:  # built as a run builds it: the pool's options under the plan's
        registry.get("task", plan.task).obj(**{**pool_options(first, "default"), **first.task_options})
    except (ValueError, TypeError, KeyError) as e:
        raise PlanError(f"plan {plan_path}: task {plan.task!r} with task_options {plan.options!r}: "
                        f"{' '.join(str(e).split())}") from None
    for arm, cfg in configs.items():
        try:
            if plan.engine == "sim":
                _check_sim_arm(cfg)
            else:  # a plan recorded with bad settings could never run, nor change
                from ..run.config import load_config
                from .runner import run_settings

                run = load_config(None, run_settings(cfg, "default", cfg.planners[0], cfg.seed_values[0]))
                # a mistyped base path passed here, then failed every run after the record was written
                if run.model is not None:
                    from ..run.build import run_model

                    if not (Path(run_model(run.model)) / "config.json").is_file():
                        raise ValueError(f"model {run.model}: not a checkpoint directory (no config.json)")
        except (ValueError, TypeError) as e:
            raise PlanError(f"plan {plan_path}: arms.{arm}: {' '.join(str(e).split())}") from None
    return configs


def _check_sim_arm(cfg: BenchConfig) -> None:
    """The simulator's run of one arm, built (not run): its `set` keys are ones the simulator reads and
    their values build a simulator, in the plan's words (no `--set`/`--pool-size` the user never gave)."""
    from ..sim.bench import _ALLOWED_EXTRA, sim_config
    from ..sim.runner import Simulator, unsupported_reason

    bad = sorted(set(cfg.extra) - _ALLOWED_EXTRA - {"eval_k", "eval_samples"})
    if bad:
        raise ValueError(f"set: {bad[0]!r} has no meaning in the simulator (engine: sim reads "
                         f"{', '.join(sorted(_ALLOWED_EXTRA))})")
    popts = cfg.extra.get("planner_options", {})
    if unsupported_reason(cfg.planners[0], popts):  # reported as skipped when it runs, not an error
        return
    Simulator(sim_config(cfg.planners[0], cfg.seed_values[0], cfg.pool_size, cfg.extra.get("batch_size", 32),
                         cfg.extra.get("n", 8), cfg.sim_profile, cfg.extra.get("sim"), popts))


def record_plan(plan: Plan, raw: bytes, plan_path: Path, out: Path) -> None:
    """Write the plan into `out` before the first run, or check that `out` holds this very plan. A
    changed plan is refused; a confirmatory plan must be committed to git unchanged first."""
    digest = sha256(raw)
    have = out / "plan.sha256"
    old = recorded_digest(out)
    if old is not None:
        if old != digest:
            raise PlanError(f"{out} holds plan {_recorded_name(out)} with sha256 {old[:12]}; this plan's is "
                            f"{digest[:12]}: a changed plan is a new plan (use another --out)")
        return
    if out.exists() and any(f.name != ".lock" for f in out.iterdir()):
        raise PlanError(f"{out} holds files but no plan.sha256: a plan starts in a new or empty --out")
    git = _committed_if_confirmatory(plan, plan_path, out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "plan.yaml", "xb") as f:  # exclusive: never overwrites
        f.write(raw)
    with open(out / "plan_record.json", "x") as f:
        json.dump({"plan": str(plan_path), "sha256": digest, "kind": plan.kind, "data": data_split_note(plan),
                   "task_options": task_options(plan), **git, "environment": environment()}, f, indent=1)
    with open(have, "x") as f:  # last: its presence means the record is complete
        f.write(f"{digest}  plan.yaml\n")


def _committed_if_confirmatory(plan: Plan, plan_path: Path, out: Path | None = None) -> dict:
    """The plan file's git state; a confirmatory plan not committed unchanged is refused."""
    git = git_state(Path(plan_path).resolve())
    if plan.kind == "confirmatory" and not git.get("plan_committed"):
        raise PlanError(f"plan {plan_path}: a confirmatory plan is committed to git, unchanged, before its runs "
                        "(commit it, or make it exploratory)")
    from .data_reuse import refuse_reused_test_split

    refuse_reused_test_split(plan, plan_path, out)
    return git


def _recorded_name(out: Path) -> str:
    try:
        return repr(recorded_plan(out).name)
    except (OSError, ValueError):
        return "(unreadable)"


def recorded_plan(out: Path) -> Plan:
    """The plan a bench directory was made with (for status and report)."""
    f = Path(out) / "plan.yaml"
    if not f.exists():
        raise PlanError(f"{out}: no plan.yaml here (not a bench made with --plan)")
    return load_plan(f)[0]


def run_plan(plan: Plan, raw: bytes, plan_path: Path, out: Path, jobs: int = 2, log=print) -> None:
    """Record the plan, then run every arm's bench (finished runs reused, unfinished ones resumed)."""
    from ..run.rundir import OutLock
    from .runner import run_benches

    check_plan(plan, plan_path)  # bad task options or arm settings fail before anything is written
    if recorded_digest(out) is None:  # nor is an empty --out made for a plan that may not start
        _committed_if_confirmatory(plan, plan_path, out)
    if plan.wall_clock and jobs != 1:
        log(f"bench plan {plan.name}: a wall-clock plan (budget.wall_seconds) runs one run at a time; --jobs {jobs} "
            "ignored")
        jobs = 1
    configs = {a: arm_config(plan, a, out, jobs) for a in plan.arms}
    out.mkdir(parents=True, exist_ok=True)
    with OutLock(out, "bench --plan --out"):
        record_plan(plan, raw, plan_path, out)
        for arm, cfg in configs.items():
            log(f"bench plan {plan.name}: arm {arm} ({plan.arms[arm].planner}), seeds {cfg.seed_values[0]}..{cfg.seed_values[-1]}")
        record_load(out, "start")
        # one queue, seed by seed with the arms' order rotated (runner.interleave): arms share the machine's
        # noise, and no core idles at an arm's last seed
        run_benches(list(configs.values()), jobs, log=log)
        record_load(out, "end")


def record_load(out: Path, when: str) -> None:
    """The machine's load averages at a plan's start and end (appended to DIR/load.jsonl): a wall-clock
    figure is only as good as the quiet it was measured in (WAVE4)."""
    import os
    import time

    try:
        load = list(os.getloadavg())
    except OSError:  # not every platform has them
        load = None
    with (out / "load.jsonl").open("a") as f:
        f.write(json.dumps({"when": when, "time": time.time(), "loadavg": load, "cpus": os.cpu_count()}) + "\n")
