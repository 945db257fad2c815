"""`rollwise bench --engine sim`: the bench protocol with the simulator in place of the tiny model.

Each (planner, seed) run is the same as a tiny-model bench run: the same pool size, batch, group size and
token budget, held-out accuracy after every `eval_tokens` generated tokens, and a `metrics.jsonl` with the loop's field
names, so `bench/report.py` computes the same figures from either. The simulator's parameters are a
named profile (`profiles.py`; `tiny` is fitted to the tiny model's GRPO runs). Runs take well under a
second, so they run in this process, one after the other.

Differences from a tiny-model run, stated rather than hidden: there is no learner (mean |advantage| is
absent), held-out accuracy has no sampling noise (it is computed from the population model), and
`wall_s` is the timing model's simulated seconds for its default (7B-class) parameters.
"""
from __future__ import annotations

import json
from pathlib import Path

from .profiles import profile_configs
from .runner import SimConfig, Simulator, unsupported_reason

MAX_STEPS = 100_000
STALL_STEPS = 50  # a planner that spends no budget for this many steps in a row has stopped training
_ALLOWED_EXTRA = {"planner_options", "batch_size", "n", "sim"}


def sim_config(planner: str, seed: int, pool_size: int, batch: int = 32, n: int = 8, profile: str = "tiny",
               overrides: dict | None = None, planner_options: dict | None = None,
               population_seed: int = 0) -> SimConfig:
    """One bench run's simulator: the population is the same for every seed (one task, one base model),
    the seed drives sampling and the planner, as in a tiny-model bench run."""
    pop, dyn, greedy = profile_configs(profile, overrides)
    return SimConfig(prompts=pool_size, steps=MAX_STEPS, batch=batch, n=n, planner=planner,
                     planner_options=planner_options or {}, seed=seed, population_seed=population_seed,
                     keep_rows=False,
                     population=pop, dynamics=dyn, greedy_eval=greedy)


def budget_rows(sim: Simulator, budget_tokens: int, eval_tokens: int = 0, eval_every: int = 0) -> list[dict]:
    """Run until the budget is spent; rows as the training loop writes them (bench/report.py reads them)."""
    acc = lambda: sim.pop.heldout_acc(sim.cfg.greedy_eval)  # noqa: E731
    rows = [{"step": 0, "tokens": 0, "eval_acc": acc()}]
    wall, idle = 0.0, 0
    while sim.ledger.budget_tokens() < budget_tokens and sim.step < MAX_STEPS and idle < STALL_STEPS:
        before = sim.ledger.budget_tokens()
        row = sim.train_step()
        idle = idle + 1 if row["step_tokens"] == 0 else 0
        wall += row["sim_gen_s"] + row["sim_learn_s"]
        last = sim.ledger.budget_tokens() >= budget_tokens or idle == STALL_STEPS
        if idle == STALL_STEPS:
            row["stalled"] = True  # e.g. an oracle that finds no prompt left with 0 < p < 1
        due = (eval_every and sim.step % eval_every == 0) or \
            (eval_tokens and sim.ledger.budget_tokens() // eval_tokens > before // eval_tokens)
        if (eval_tokens or eval_every) and (last or due):
            row["eval_acc"] = acc()
        row["wall_s"] = wall
        row.update({f"tokens_{k}": v for k, v in sim.ledger.legacy_tokens().items()})
        row.update({f"rollouts_{k}": v for k, v in sim.ledger.legacy_rollouts().items()})
        rows.append(row)
    return rows


def run_sim_bench(cfg, mix: str, planner: str, seed: int, out_dir: Path, log=print) -> None:
    """One bench run (cfg: bench.runner.BenchConfig) through the simulator; writes metrics.jsonl and
    done.json, or skipped.json with the reason when the simulator cannot run the planner."""
    if mix != "default":
        raise ValueError(f"--engine sim: the simulator's profiles are calibrated on the 'default' mix only, "
                         f"not {mix!r}")
    bad = set(cfg.extra) - _ALLOWED_EXTRA
    if bad:
        raise ValueError(f"--engine sim: --set {sorted(bad)[0]} has no meaning in the simulator "
                         f"(it takes {', '.join(sorted(_ALLOWED_EXTRA))})")
    out_dir.mkdir(parents=True, exist_ok=True)
    popts = cfg.extra.get("planner_options", {})
    why = unsupported_reason(planner, popts)
    if why:
        (out_dir / "skipped.json").write_text(json.dumps({"reason": why}))
        log(f"bench: skipped {mix}/{planner}/seed{seed}: {why}")
        return
    sim = Simulator(sim_config(planner, seed, cfg.pool_size, cfg.extra.get("batch_size", 32),
                               cfg.extra.get("n", 8), cfg.sim_profile, cfg.extra.get("sim"), popts))
    from ..bench.runner import eval_tokens

    rows = budget_rows(sim, cfg.budget_tokens, eval_tokens(cfg))
    (out_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from ..bench.environment import environment
    from ..bench.runner import metrics_record

    (out_dir / "done.json").write_text(json.dumps({"engine": "sim", "profile": cfg.sim_profile,
                                                   **metrics_record(out_dir), "environment": environment()}))
