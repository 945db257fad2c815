"""Fresh data per confirmatory plan (issue 47, item 3).

Every Bench 3.0 plan read data seed 0, and the three task-1 confirmatory plans read the same test split:
"seeds never used to choose" covered the training seeds, not the prompts. A confirmatory plan must
therefore name a data seed whose test split no earlier record of the same task (and task options) read,
or say why it re-reads one (`replication: "..."`, a replication, labelled so in its record and report).

The earlier reads are the records beside the new one and in the repository's benchmarks/results: every
directory holding a `plan.yaml` of any kind (an exploratory look at a test split is a look too).
"""
from __future__ import annotations

from pathlib import Path


def _record_dirs(plan_path: Path, out: Path | None) -> list[Path]:
    roots = []
    for p in Path(plan_path).resolve().parents:  # the repository's results, if the plan lives in one
        if (p / "benchmarks" / "results").is_dir():
            roots.append(p / "benchmarks" / "results")
            break
    if out is not None:
        roots.append(Path(out).resolve().parent)
    seen, dirs = set(), []
    for root in roots:
        for d in sorted(root.iterdir()) if root.is_dir() else ():
            d = d.resolve()
            if d in seen or (out is not None and d == Path(out).resolve()) or not (d / "plan.yaml").is_file():
                continue
            seen.add(d)
            dirs.append(d)
    return dirs


def earlier_reads(plan, plan_path: Path, out: Path | None = None) -> list[str]:
    """The records that already read this plan's task, task options, data seed and split."""
    from .plan import PlanError, load_plan

    hits = []
    for d in _record_dirs(plan_path, out):
        try:
            other, _ = load_plan(d / "plan.yaml")
        except (PlanError, ValueError, OSError):
            continue  # a record whose plan no longer parses under today's rules reads nothing we can compare
        if (other.task, other.options, other.data_seed, other.split) == (plan.task, plan.options, plan.data_seed,
                                                                         plan.split):
            hits.append(d.name)
    return hits


def refuse_reused_test_split(plan, plan_path: Path, out: Path | None = None) -> None:
    """A confirmatory plan on a test split an earlier record read: one line, unless it says why."""
    from .plan import PlanError

    if plan.kind != "confirmatory" or plan.replication:
        return
    hits = earlier_reads(plan, plan_path, out)
    if hits:
        raise PlanError(f"plan {plan_path}: task {plan.task!r} data_seed {plan.data_seed} {plan.split} split was "
                        f"already read by {', '.join(hits[:3])}{' ...' if len(hits) > 3 else ''}: a confirmatory "
                        "plan reads fresh data (a data_seed no record used), or states `replication: \"why\"`")
