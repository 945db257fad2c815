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

A plan that also ends its runs on modelled GPU-seconds (budget.gpu_seconds) is estimated from one typical
step of its baseline (`gpu_step`): batch_size prompts x n rows, every response of the length its length scale
implies at step 1 (the cluster's mean generation length / length_scale) and every prompt assumed as long
[ASSUMPTION: the plan says nothing of prompt lengths]; that step's modelled GPU-seconds say how many steps the
budget buys, their compute units under the plan's profile what those steps cost, and the run's training is
read at whichever budget those steps reach first. The first finished runs correct it, as above.
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
        units = plan.budget_compute
        if plan.budget_gpu_seconds:  # or the GPU-second budget, if its steps cost fewer units (module docstring)
            g = gpu_step(plan)
            units = min(units, g["steps"] * g["units"])
        train = units * prof.seconds_per_unit  # (the plan's profile weighs work otherwise: rough)
    else:
        train = plan.budget_tokens * v["measured_s_per_decode_token"]
    evals = (plan.evaluations + 1) * plan.eval_size * (1 + plan.samples_per_prompt())
    return train + evals * v["decode_tokens_per_rollout"] * prof.seconds_per_unit


def gpu_step(plan: Plan) -> dict:
    """The baseline's typical step under a GPU-second budget (module docstring): {length: response tokens,
    gpu_s: its modelled GPU-seconds, steps: the budget's steps (at least 1: the step that reaches it is run),
    units: its compute units under the plan's cost profile}."""
    import math

    from ..run.config import load_config
    from ..systems import scale
    from ..systems.profile import load_profile as load_cluster
    from .costs import compute_units, logprob_passes
    from .runner import run_settings

    cfg = arm_config(plan, plan.baseline, Path("."))
    run = load_config(None, run_settings(cfg, "default", cfg.planners[0], cfg.seed_values[0]))
    cluster = load_cluster(plan.cluster)
    length = cluster.gen_len_mean / plan.length_scale
    rows, prompts = run.batch_size * run.n, run.batch_size
    learner = rows * 2 * length * run.learner.epochs
    row = {"step": 1, "rollouts": rows, "prompts": prompts, "prompt_tokens": prompts * length, "learner_tokens": learner,
           **dict.fromkeys(scale.LENGTH_FIELDS, length)}
    gpu_s = scale.gpu_seconds([row], cluster, plan.length_scale, scale.mode_of(run.to_dict()))[-1]
    units = compute_units({"decode_tokens": rows * length, "prefill_tokens": prompts * length,
                           "learner_tokens": learner,
                           "logprob_tokens": logprob_passes(run.to_dict()) * learner / run.learner.epochs,
                           "scoring_tokens": 0, "aux_tokens": 0}, load_profile(plan.profile))
    return {"length": length, "gpu_s": gpu_s, "steps": max(math.ceil(plan.budget_gpu_seconds / gpu_s), 1),
            "units": units}


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
    if plan.budget_gpu_seconds and plan.engine != "sim":
        g = gpu_step(plan)
        lines.append(f"GPU-second budget: a typical step of the baseline (responses of {g['length']:.3g} tokens = the "
                     f"cluster's mean / length_scale, prompts assumed as long) is {g['gpu_s']:,.0f} modelled GPU-s under "
                     f"{plan.cluster}, so {plan.budget_gpu_seconds:,.0f} GPU-s is about {g['steps']} steps, "
                     f"{g['steps'] * g['units']:,.0f} of the {plan.budget_compute:,.0f} compute units; seconds per run "
                     "above assume whichever budget those steps reach first")
    from .stats import min_seeds_for_family

    need = min_seeds_for_family(len(plan.family), plan.alpha)
    if len(plan.seeds) < need:
        lines.append(f"warning: with a family of {len(plan.family)} at alpha {plan.alpha:g} the exact test needs at "
                     f"least {need} seeds to pass Holm; this plan has {len(plan.seeds)}, so it can decide nothing")
    return "\n".join(lines)
