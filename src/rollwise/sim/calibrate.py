"""Fit the simulator to real runs of the same protocol: GRPO's, and a few other planners' whose batches
carry different amounts of signal (DAPO fills every slot with an informative group, the oracle never
rolls out a hopeless one), so that how a step's length depends on its informative rows is identifiable. The planners not used in
the fit are the test of the fitted model (benchmarks/sim_rank.py).

Targets per planner (from each run's metrics.jsonl, averaged over seeds; the simulator's runs are
summarised by the same code, so the two sides are measured alike):

  * eval   - held-out accuracy at each evaluation step (greedy decoding on the tiny model; the fraction
             of held-out prompts with p > 1/2 in the simulator),
  * zv     - fraction of generated groups that are zero-variance, in `bins` equal bins of steps,
  * reward - mean training reward (sampling at T = 1), in the same bins,
  * persist - of the prompts whose last visit was zero-variance, the fraction zero-variance again,
  * tokens - generated tokens per step.

Error: mean over planners and targets of ((sim - real) / se)^2, where se is the seed-to-seed standard error of the
real figure, floored (`SE_FLOOR`) so that one very consistent point does not dominate. A value near 1
means the simulator is within the real runs' own noise.

Search: uniform random draws in `SPACE`, then Gaussian steps around the best (a plain (1+1) search with
a shrinking step). Each candidate is scored on several simulator seeds, so the fit does not chase one
population's luck. Everything is seeded.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..run.records import rows as metrics_rows
from .bench import budget_rows, sim_config
from .runner import Simulator

# Fitted parameters: (section, name) -> (low, high)
SPACE = {
    ("population", "diff_sd"): (0.5, 5.0),
    ("population", "skill0"): (-3.0, 2.0),
    ("population", "cluster_sd"): (0.0, 1.5),
    ("population", "median_len"): (3.0, 7.0),
    ("population", "greedy_threshold"): (0.05, 0.6),
    ("dynamics", "eta_global"): (0.0, 0.6),
    ("dynamics", "eta_cluster"): (0.0, 2.0),
    ("dynamics", "eta_prompt"): (0.0, 4.0),
    ("dynamics", "rows_r0"): (0.0, 1000.0),
}
SE_FLOOR = {"eval": 0.005, "zv": 0.01, "reward": 0.01, "persist": 0.02, "tokens": 10.0}


@dataclass
class Protocol:
    """The bench protocol both sides ran."""

    pool_size: int = 300
    batch: int = 32
    n: int = 8
    budget_tokens: int = 40_000
    eval_every: int = 5
    bins: int = 4


def figures(rows: list[dict], proto: Protocol) -> dict:
    """One run's calibration figures."""
    steps = [r for r in rows if r["step"] > 0]
    evals = {r["step"]: r["eval_acc"] for r in rows if "eval_acc" in r and r["step"] % proto.eval_every == 0}
    chunks = np.array_split(np.arange(len(steps)), proto.bins)
    revisits = sum(r.get("zv_revisits", 0) for r in steps)
    return {
        "eval": evals,
        "zv": [float(np.mean([steps[i]["zero_var_frac_gen"] for i in c])) for c in chunks],
        "reward": [float(np.mean([steps[i]["reward_mean"] for i in c])) for c in chunks],
        "persist": (sum(r.get("zv_revisits_stayed", 0) for r in steps) / revisits) if revisits else None,
        "tokens": float(np.mean([r["step_tokens"] for r in steps])),
    }


def aggregate(runs: list[dict]) -> dict:
    """Mean and standard error over seeds of each figure (eval: at the steps every run evaluated)."""
    common = sorted(set.intersection(*(set(f["eval"]) for f in runs)))
    out = {}
    vectors = {
        "eval": [[f["eval"][s] for s in common] for f in runs],
        "zv": [f["zv"] for f in runs],
        "reward": [f["reward"] for f in runs],
        "persist": [[f["persist"]] for f in runs if f["persist"] is not None],
        "tokens": [[f["tokens"]] for f in runs],
    }
    for key, vals in vectors.items():
        if not vals:
            continue
        a = np.asarray(vals, dtype=float)
        se = a.std(0, ddof=1) / np.sqrt(len(a)) if len(a) > 1 else np.zeros(a.shape[1])
        out[key] = {"mean": a.mean(0).tolist(), "se": np.maximum(se, SE_FLOOR[key]).tolist()}
    out["eval_steps"] = common
    out["seeds"] = len(runs)
    return out


def real_targets(run_dirs: list[Path], proto: Protocol) -> dict:
    runs = []
    for d in run_dirs:
        rows = metrics_rows(d)
        runs.append(figures(rows, proto))
    if len(runs) < 2:
        raise ValueError(f"calibration needs at least 2 real runs, got {len(runs)}")
    return aggregate(runs)


def params_to_overrides(params: dict) -> dict:
    out: dict = {"population": {}, "dynamics": {}}
    for (section, name), v in params.items():
        out[section][name] = v
    return out


def simulate(params: dict, proto: Protocol, seeds: list[int], planner: str = "uniform",
             profile: str = "tiny") -> dict:
    runs = []
    for s in seeds:
        sim = Simulator(sim_config(planner, s, proto.pool_size, proto.batch, proto.n, profile,
                                   params_to_overrides(params)))
        runs.append(figures(budget_rows(sim, proto.budget_tokens, eval_every=proto.eval_every), proto))
    return aggregate(runs)


def error(real: dict, sim: dict) -> tuple[float, dict]:
    """Mean squared standardised difference over every target point; and the per-target means."""
    parts = {}
    for key in ("eval", "zv", "reward", "persist", "tokens"):
        if key not in real or key not in sim:
            continue
        r, se = np.asarray(real[key]["mean"]), np.asarray(real[key]["se"])
        s = np.asarray(sim[key]["mean"])
        if key == "eval":  # align on the steps both evaluated
            idx = [i for i, st in enumerate(real["eval_steps"]) if st in sim["eval_steps"]]
            sidx = [sim["eval_steps"].index(real["eval_steps"][i]) for i in idx]
            r, se, s = r[idx], se[idx], s[sidx]
        parts[key] = float(np.mean(((s - r) / se) ** 2))
    return float(np.mean(list(parts.values()))), parts


def planners_error(reals: dict[str, dict], params: dict, proto: Protocol, seeds: list[int]) -> tuple[float, dict]:
    """Mean error over the planners of `reals` ({planner: real targets}); and each planner's (error, parts, sim)."""
    per = {}
    for planner, real in reals.items():
        sim = simulate(params, proto, seeds, planner)
        per[planner] = (*error(real, sim), sim)
    return float(np.mean([e for e, _, _ in per.values()])), per


def fit(reals: dict[str, dict], proto: Protocol, n_random: int = 300, n_local: int = 300, seeds: int = 4,
        rng_seed: int = 0, start: dict | None = None, log=None) -> dict:
    """Random search in SPACE, then a (1+1) search around the best; `start` ({(section, name): value},
    e.g. the current profile) is scored first, so a refit never ends worse than where it began."""
    rng = np.random.default_rng(rng_seed)
    keys = list(SPACE)
    lo = np.array([SPACE[k][0] for k in keys])
    hi = np.array([SPACE[k][1] for k in keys])
    sim_seeds = list(range(1000, 1000 + seeds))  # not the real runs' seeds: nothing is shared with them

    def score(x):
        return planners_error(reals, dict(zip(keys, x.tolist())), proto, sim_seeds)[0]

    best_x, best = None, np.inf
    if start is not None:
        best_x = np.clip(np.array([float(start.get(k, (l + h) / 2)) for k, l, h in zip(keys, lo, hi)]), lo, hi)
        best = score(best_x)
    for i in range(n_random):
        x = lo + rng.random(len(keys)) * (hi - lo)
        e = score(x)
        if e < best:
            best_x, best = x, e
        if log and (i + 1) % 50 == 0:
            log(f"calibrate: random {i + 1}/{n_random}  best error {best:.3f}")
    step = 0.15 * (hi - lo)
    for i in range(n_local):
        x = np.clip(best_x + rng.standard_normal(len(keys)) * step, lo, hi)
        e = score(x)
        if e < best:
            best_x, best = x, e
        else:
            step *= 0.995  # shrink slowly toward the best
        if log and (i + 1) % 50 == 0:
            log(f"calibrate: local {i + 1}/{n_local}  best error {best:.3f}")
    return {f"{s}.{n}": round(float(v), 4) for (s, n), v in zip(keys, best_x)}


def from_dotted(params: dict) -> dict:
    return {tuple(k.split(".", 1)): v for k, v in params.items()}
