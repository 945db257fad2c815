"""Named parameter sets of the simulator.

`default`: order-of-magnitude figures for a reasoning model (lengths of hundreds of tokens, a wide spread
of difficulty); nothing fitted.

`chain`: the length shape and initial difficulty of embedded task 2's base (`chain`), fitted to its own
samples by `benchmarks/task_profile.py --task chain` (benchmarks/results/task2_profile.md): lengths set by
the level (p99 ~3x the median), nearly none of a prompt's spread left within it, wrong answers no longer
than right ones within a prompt. The learning dynamics are not fitted: the tiny model's are used.

`tiny`: fitted to the embedded tiny model's GRPO runs by `benchmarks/sim_calibrate.py` (the fit, its
targets and its error are recorded in `benchmarks/results/sim_calibration.md`). Only the parameters that
script searches are fitted; the length shape is set to the tiny task's (answers of a few tokens, cut at
max_new_tokens = 10) and the rest keep their defaults. `rollwise bench --engine sim` uses it, so the
simulator runs the bench protocol on the same pool size, batch, group size and budget as the tiny model.
"""
from __future__ import annotations

from dataclasses import replace

from .dynamics import DynamicsConfig
from .population import PopulationConfig

# The tiny task's length shape (not fitted): ~5-token answers with little spread, max_new_tokens = 10,
# prompts of ~17 tokens, 6 skill clusters (the task's 6 levels); and the learner's defaults: GRPO with
# std normalisation, a token-mean loss over the rows whose advantage is not zero.
TINY_SHAPE = {
    "population": {"clusters": 6, "len_prompt_sd": 0.15, "len_group_sd": 0.05, "len_sample_sd": 0.15,
                   "len_diff_slope": 0.1, "wrong_len": 0.1, "max_len": 10, "prompt_len_min": 14,
                   "prompt_len_max": 20},
    "dynamics": {"signal": "std", "normalize": "rows"},
}

# Written by benchmarks/sim_calibrate.py (see its --write-profile); do not edit by hand.
TINY_FIT = {
    "population": {"diff_sd": 2.3906, "skill0": -1.4146, "cluster_sd": 1.2438, "median_len": 4.0981, "greedy_threshold": 0.2605},
    "dynamics": {"eta_global": 0.0, "eta_cluster": 0.1774, "eta_prompt": 0.236, "rows_r0": 133.4042},
}

# Written from benchmarks/results/task2_profile.json ("sim_shape", without its fit error).
CHAIN_BASE = {"median_len": 51.71, "len_prompt_sd": 0.655, "len_diff_slope": 0.419, "len_group_sd": 0.05, "len_sample_sd": 0.066, "wrong_len": 0.004, "max_len": 224, "clusters": 8, "prompt_len_min": 8, "prompt_len_max": 74, "diff_sd": 1.5, "skill0": -3.0, "cluster_sd": 0.5, "greedy_threshold": 0.2414}

PROFILES = {
    "default": {"population": {}, "dynamics": {}, "greedy_eval": False},
    "tiny": {"population": {**TINY_SHAPE["population"], **TINY_FIT["population"]},
             "dynamics": {**TINY_SHAPE["dynamics"], **TINY_FIT["dynamics"]}, "greedy_eval": True},
    "chain": {"population": CHAIN_BASE, "dynamics": {**TINY_SHAPE["dynamics"], **TINY_FIT["dynamics"]},
              "greedy_eval": True},
}


def profile_configs(name: str, overrides: dict | None = None) -> tuple[PopulationConfig, DynamicsConfig, bool]:
    """(population, dynamics, greedy_eval) of a named profile, with {"population": {...}, "dynamics": {...}}
    overrides on top. Unknown names and keys raise with the list of known ones."""
    if name not in PROFILES:
        raise ValueError(f"unknown sim profile {name!r}; available: {', '.join(PROFILES)}")
    prof = PROFILES[name]
    overrides = overrides or {}
    bad = set(overrides) - {"population", "dynamics"}
    if bad:
        raise ValueError(f"sim profile overrides: unknown section {sorted(bad)[0]!r} (population, dynamics)")
    pop = _apply(PopulationConfig(), {**prof["population"], **overrides.get("population", {})}, "population")
    dyn = _apply(DynamicsConfig(), {**prof["dynamics"], **overrides.get("dynamics", {})}, "dynamics")
    return pop, dyn, bool(prof["greedy_eval"])


def _apply(cfg, values: dict, section: str):
    known = set(cfg.__dataclass_fields__)
    for k in values:
        if k not in known:
            raise ValueError(f"sim {section}: unknown parameter {k!r}; known: {', '.join(sorted(known))}")
    cast = {k: type(getattr(cfg, k))(v) for k, v in values.items()}  # e.g. an int given for a float
    return replace(cfg, **cast)
