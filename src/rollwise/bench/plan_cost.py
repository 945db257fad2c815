"""What a planned bench costs: `--dry-run` estimates it before anything runs, `bench status DIR` says
what is done and what is left. Core-hours, since every run is one process on one core.

A run's seconds are, in order of preference: the mean measured seconds (done.json: the CPU seconds of the
run's process where recorded, else its wall seconds, which grow with the machine's load) of the arm's finished
runs; of any finished run of the bench; or the CPU cost profile's estimate: the plan's compute units at
the profile's seconds per unit (a rough figure: the plan's profile weighs decode, prefill and the learner
otherwise than this CPU does) or, for the simulator's token-ended runs, its validation run's measured
seconds per decoded token times the budget tokens; plus the
evaluations: (evaluations + 1) x eval_size x (1 + samples per prompt) rollouts of the validation run's mean
length, at its decode seconds per token). The profile's figures come from arithmetic (10-token
responses); a task with longer responses or another planner moves them, which the first finished
runs then correct. The simulator engine costs nothing worth counting.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .costs import load_profile
from .plan import Plan, arm_config
from .runner import run_dir

DEFAULT_CPU_PROFILE = "cpu-epyc-v1"


def profile_run_seconds(plan: Plan, cpu_profile: str = DEFAULT_CPU_PROFILE) -> float:
    """One run's seconds from the CPU cost profile's validation figures."""
    if plan.engine == "sim":
        return 0.0
    prof = load_profile(cpu_profile)
    v = prof.extra.get("validation", {})
    if "measured_s_per_decode_token" not in v or prof.seconds_per_unit is None:
        raise ValueError(f"cost profile {cpu_profile} has no measured validation figures to estimate from")
    if plan.budget_compute:  # the compute budget ends the run: its units at the CPU profile's price of one
        train = plan.budget_compute * prof.seconds_per_unit  # (the plan's profile weighs work otherwise: rough)
    else:
        train = plan.budget_tokens * v["measured_s_per_decode_token"]
    evals = (plan.evaluations + 1) * plan.eval_size * (1 + plan.samples_per_prompt())
    return train + evals * v["decode_tokens_per_rollout"] * prof.seconds_per_unit


def run_states(plan: Plan, out: Path) -> dict[str, list[dict]]:
    """Per arm, per seed: {"done": bool, "seconds": measured seconds of a finished run, or the training
    seconds so far of an unfinished one (its last metrics row's wall_s)}."""
    states = {}
    for arm in plan.arms:
        cfg = arm_config(plan, arm, out)
        rows = []
        for s in plan.run_seeds(arm):
            d = run_dir(cfg, "default", plan.arms[arm].planner, s)
            done = (d / "done.json").exists() or (d / "skipped.json").exists()
            seconds = 0.0
            if (d / "done.json").exists():  # its CPU seconds where recorded: core-seconds, whatever the load
                done_rec = json.loads((d / "done.json").read_text())
                seconds = float(done_rec.get("cpu_seconds") or done_rec.get("seconds", 0.0))
            elif (d / "metrics.jsonl").exists():
                last = [x for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
                try:
                    seconds = float(json.loads(last[-1]).get("wall_s", 0.0)) if last else 0.0
                except json.JSONDecodeError:  # the line being written
                    seconds = 0.0
            rows.append({"seed": s, "done": done, "seconds": seconds})
        states[arm] = rows
    return states


def estimate(plan: Plan, out: Path | None = None, cpu_profile: str = DEFAULT_CPU_PROFILE) -> dict:
    """Runs, core-hours done and left, per arm and in total."""
    states = run_states(plan, out) if out is not None and Path(out).exists() else {
        a: [{"seed": s, "done": False, "seconds": 0.0} for s in plan.run_seeds(a)] for a in plan.arms}
    finished = [r["seconds"] for rs in states.values() for r in rs if r["done"] and r["seconds"] > 0]
    fallback = float(np.mean(finished)) if finished else profile_run_seconds(plan, cpu_profile)
    arms = {}
    for arm, rs in states.items():
        mine = [r["seconds"] for r in rs if r["done"] and r["seconds"] > 0]
        per_run = float(np.mean(mine)) if mine else fallback
        done = sum(r["done"] for r in rs)
        spent = sum(r["seconds"] for r in rs)
        left = sum(max(per_run - r["seconds"], 0.0) for r in rs if not r["done"])
        arms[arm] = {"runs": len(rs), "done": done, "left": len(rs) - done, "seconds_per_run": per_run,
                     "measured": bool(mine), "core_hours_spent": spent / 3600, "core_hours_left": left / 3600,
                     "core_hours_total": (spent + left) / 3600}
    total = {k: sum(a[k] for a in arms.values()) for k in
             ("runs", "done", "left", "core_hours_spent", "core_hours_left", "core_hours_total")}
    return {"arms": arms, "total": total, "source": "measured" if finished else f"cost profile {cpu_profile}"}


def format_estimate(plan: Plan, est: dict, title: str) -> str:
    lines = [f"{title}: plan {plan.name} ({plan.kind}), {len(plan.arms)} arms x {len(plan.seeds)} seeds, "
             f"engine {plan.engine}; seconds per run from {est['source']}",
             f"{'arm':<24} {'runs':>5} {'done':>5} {'left':>5} {'s/run':>8} {'core-h spent':>13} {'core-h left':>12}"]
    for arm, a in est["arms"].items():
        lines.append(f"{arm:<24} {a['runs']:>5} {a['done']:>5} {a['left']:>5} {a['seconds_per_run']:>8.0f} "
                     f"{a['core_hours_spent']:>13.2f} {a['core_hours_left']:>12.2f}")
    t = est["total"]
    lines.append(f"{'total':<24} {t['runs']:>5} {t['done']:>5} {t['left']:>5} {'':>8} {t['core_hours_spent']:>13.2f} "
                 f"{t['core_hours_left']:>12.2f}")
    lines.append(f"core-hours in all: {t['core_hours_total']:.2f} (a confirmatory plan's envelope is 16, tuning included)")
    from .stats import min_seeds_for_family

    need = min_seeds_for_family(len(plan.family), plan.alpha)
    if len(plan.seeds) < need:
        lines.append(f"warning: with a family of {len(plan.family)} at alpha {plan.alpha:g} the exact test needs at "
                     f"least {need} seeds to pass Holm; this plan has {len(plan.seeds)}, so it can decide nothing")
    return "\n".join(lines)
