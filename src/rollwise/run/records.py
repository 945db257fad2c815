"""A run's record, `metrics.jsonl`: its rows are built here and read here.

Built: `step_row` makes the row of a trained step for the trainer and the simulator alike, from the same
objects (the step's context and outcome, the ledger's view), so a field means the same thing on both.
What only one side can know is declared (`ONLY`, `NULL_IN_SIM`) and checked when a row is built.

Read: every tool that reads rows (the trainer on resume, the bench and its report, the simulator's
calibration, the benchmark scripts) reads them here, so a cut or damaged line is treated the same way
everywhere."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

METRICS = "metrics.jsonl"
# Fields read off a clock (training time so far: wall, this process's CPU, generation; Ray worker restarts):
# they differ between two runs of one seed, so reruns and exactness checks compare every field but these.
TIMING = ("wall_s", "cpu_s", "gen_s", "worker_restarts")


def metrics_path(where: str | Path) -> Path:
    """A run directory or the file itself -> the metrics file."""
    p = Path(where)
    return p / METRICS if p.is_dir() or p.suffix != ".jsonl" else p


# ---- building a step's row (the trainer's and the simulator's) ----------------------------------------
# Fields only one side has. The trainer: its reward function's failures, the updates its finite guard
# undid, the staleness of the trained rows (the simulator's steps are synchronous and on-policy: it
# skips that pass), and the compute counts with their priced `compute` (the simulator's learner counts
# response tokens only, so its rows carry none and a compute budget is never read from them; its
# summary keeps prompt_tokens and learner_tokens as before). The simulator: its timing model's seconds and rounds, and its dynamics' count of
# trained groups that carried a learning signal (`trained_groups` is `batch_groups`, kept for old readers).
# Besides these, a row carries its learner's own stats as the learner reports them (the torch learner's
# loss, entropy, grad_norm, ...; the simulator's dynamics report none) and its planner's (`ctx.metrics`).
COMPUTE = ("prompt_tokens", "learner_tokens", "old_logprob_tokens", "ref_logprob_tokens", "scoring_tokens", "compute")
ONLY = {"trainer": ("reward_errors", "skipped_steps", "staleness_max", "staleness_mean", *COMPUTE),
        "sim": ("trained_groups", "informative_trained", "rounds", "sim_gen_s", "sim_learn_s")}
# Fields the simulator cannot know, null in its rows: it has no response text to cut at a length limit, and
# no per-row lengths (the step-time model, systems/steptime.py, reads a step's length shape from these).
LENGTHS = ("len_mean", "len_p50", "len_p90", "len_max")
NULL_IN_SIM = ("truncated_frac", *LENGTHS)


def ledger_view(ledger, budget=None) -> dict:
    """The ledger's figures for a metrics row (taken right after a step's rollouts are settled). Without
    a Budget to price them (run/budget.py: the simulator) the COMPUTE fields are left out."""
    led = ledger
    compute = {} if budget is None else {**led.compute_counts(), "compute": budget.spent(led).compute}
    return {"tokens": led.budget_tokens(), "rollouts": led.budget_rollouts(),
            **{f"tokens_{k}": v for k, v in led.legacy_tokens().items()},
            **{f"rollouts_{k}": v for k, v in led.legacy_rollouts().items()},
            "tokens_reused": led.reused_tokens, **compute, **led.breakdown()}


def step_row(ctx, out, view: dict, tokens_before: int, *, counts_only: bool = False, extra: dict | None = None,
             side: str = "trainer") -> dict:
    """The metrics row of a trained step. `ctx`: its StepContext (the groups generated, the planner's
    metrics); `out`: the driver's StepOutcome; `view`: `ledger_view` after the step; `tokens_before`: the
    budget tokens before it. `counts_only`: the groups are count-level (the simulator's, binary rewards):
    the mean reward comes from their counts and `truncated_frac` is null. `extra`: the fields only this
    `side` has, which must be the ones ONLY declares for it."""
    generated = list(ctx.groups.values())
    batch = out.batch.groups
    sizes = [g.n for g in batch] or [0]
    zv_gen = None
    if counts_only:
        v = out.visits  # the generated groups as columns (the driver's), empty ones left out
        reward_mean, truncated, lengths = int(v.correct.sum()) / max(int(v.n.sum()), 1), None, None
        if len(v) == len(generated):  # none empty: the same groups, counted without a pass over them
            zv_gen = int(v.zero_variance.sum())
    else:
        reward_mean = float(np.mean([r.reward for g in generated for r in g.rollouts] or [0]))
        # responses cut at their length limit (finish reason "length") before EOS
        truncated = float(np.mean([r.finish_reason == "length" for g in generated for r in g.rollouts] or [0]))
        lengths = np.array([len(r.token_ids_T) for g in generated for r in g.rollouts] or [0])
    extra = extra or {}
    if set(extra) - set(ONLY[side]):
        raise ValueError(f"metrics row: fields {sorted(set(extra) - set(ONLY[side]))} are not declared for the "
                         f"{side} (run/records.py ONLY): declare them, or build them for both sides")
    if zv_gen is None:
        zv_gen = sum(g.zero_variance for g in generated)
    # the batch's groups and zero-variance share as its learner saw them (the torch learner's stats, after
    # any recomposition; the simulator's dynamics report them too), from the batch if it does not say
    if "batch_groups" in out.stats and "zero_var_frac" in out.stats:
        batch_groups, zv_batch = out.stats["batch_groups"], out.stats["zero_var_frac"]
    else:
        batch_groups, zv_batch = len(batch), sum(g.zero_variance for g in batch) / max(len(batch), 1)
    return {"step": ctx.step + 1, "tokens": view["tokens"], "step_tokens": view["tokens"] - tokens_before,
            "rollouts": view["rollouts"], "prompts": len(generated),
            "zero_var_frac_gen": zv_gen / max(len(generated), 1),
            "reward_mean": reward_mean, "truncated_frac": truncated,
            # the generated rows' response lengths this step (the long tail a synchronous step waits for)
            **dict(zip(LENGTHS, (None,) * 4 if lengths is None else
                       (float(lengths.mean()), float(np.percentile(lengths, 50)), float(np.percentile(lengths, 90)),
                        int(lengths.max())))),
            "group_min": min(sizes), "group_mean": float(np.mean(sizes)), "group_max": max(sizes),
            "batch_groups": batch_groups, "zero_var_frac": zv_batch,
            **{k: v for k, v in view.items() if k not in ("tokens", "rollouts")},
            **out.staleness, **out.persist, **ctx.metrics, **out.stats, **extra}


# ---- reading ---------------------------------------------------------------------------------------
def read_rows(where: str | Path, *, live: bool = False) -> tuple[list[dict], int | None]:
    """(rows, the number of a last line cut short or None). A missing file has no rows. The last line
    without a newline after it that is not JSON is a write cut short (a killed run, or with `live` one
    being written): it is left out and its number returned. Any other line that is not a JSON object is
    an error naming the file and line: the file is a run's record and is never silently reinterpreted."""
    path = metrics_path(where)
    if not path.exists():
        return [], None
    lines = path.read_text().split("\n")
    rows, cut = [], None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):  # no newline after it: a write cut short
                cut = i
                continue
            if live:
                continue
            raise ValueError(f"{path}: line {i} is not JSON; fix or remove it") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}: line {i} is not a JSON object")
        rows.append(row)
    return rows, cut


def rows(where: str | Path) -> list[dict]:
    """The complete rows of a finished or running run (a last line cut short is left out)."""
    return read_rows(where)[0]


def rows_upto(path: Path, upto: int) -> list[dict]:
    """The rows up to the checkpoint's step. A last line cut short by a kill is dropped only when it is a row
    after the checkpoint (the rows still reach the checkpoint's step: the resumed run writes it again);
    if it was the checkpoint's own row, dropping it would lose it, so it is an error naming the line, as
    is any other line that is not JSON (the file is the run's record: never silently rewritten)."""
    rows, cut = read_rows(path)
    rows = [r for r in rows if r.get("step", 0) <= upto]
    if cut is not None and upto and max((r.get("step", 0) for r in rows), default=0) < upto:
        raise ValueError(f"{path}: line {cut} is cut short and the rows stop before the checkpoint's step {upto}, "
                         "so it held a row the checkpoint covers; restore the file (or remove the line and accept "
                         "the gap) before resuming")
    return rows


def write_rows(path: Path, rows: list[dict]) -> None:
    write_atomic(path, "".join(json.dumps(finite_row(r), allow_nan=False) + "\n" for r in rows))


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def finite_row(row: dict) -> dict:
    """The row as strict JSON can hold it: a non-finite float (NaN, inf) becomes null and its key is listed
    in `nonfinite`, so the file parses everywhere and the loss of the value is visible."""
    bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]
    if not bad:
        return row
    return {**{k: None if k in bad else v for k, v in row.items()},
            "nonfinite": sorted(set(row.get("nonfinite") or []) | set(bad))}
