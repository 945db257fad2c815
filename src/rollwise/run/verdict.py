"""The learning verdict: did held-out accuracy move beyond its noise, and if not, why and what to try.

A new user's GRPO run on their own task ended with "0.015 -> 0.020" and nothing else: no word that the
change was within one standard error, nor that 81-90% of its groups scored alike (so taught nothing)
throughout. This module reads the evidence a run already records and says it in one line:

- **moved or not**: the change from the first evaluation to the last against the standard error of that
  change. With per-prompt outcomes (eval_outcomes.jsonl) the s.e. is the paired one (the same prompts are
  evaluated each time, so their differences are what varies); without, the two evaluations' binomial
  s.e.s (metrics rows' `eval_se`) add in quadrature. A change beyond `MOVED_SE` of them is a move.
- **why not**: the mean share of generated groups whose rollouts all scored alike (zero advantage: nothing
  to learn from them) and whether those were all wrong (the model solves almost none of the prompts) or all
  right (it already solves them), and whether the policy's entropy fell while accuracy stood still
  (sharpening what it already does).
- **what to try**, by cause.

Pure functions over metrics rows and outcome bits, whatever planner made them: the trainer says the
verdict every `EVERY_EVALS` evaluations and at the end of a run (run/loop.py); `rollwise compare` says it
for each run it reads.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MOVED_SE = 2.0  # a change beyond 2 standard errors of the change (about 95% two-sided) counts as a move
SHARPEN = 0.75  # entropy below this share of its early level while accuracy stood still: sharpening
EARLY = 3  # updated steps whose mean entropy is the early (and the recent) level
MOSTLY_EQUAL = 0.5  # a zero-variance share from which the groups that taught nothing are the story
EVERY_EVALS = 5  # the trainer says the verdict so far every this many evaluations (and at the end)

TRY = {
    "none solved": "try easier data or a warm start on this task, a larger n, a higher temperature, or a planner "
                   "that skips prompts the model never solves (greso, dapo)",
    "all solved": "try harder data, or a planner that skips prompts the model always solves (greso, dapo)",
    "sharpens": "try a lower learner.lr (entropy fell fast), a higher temperature, a larger n, or check that the "
                "reward separates right from wrong answers",
    "flat": "try more steps or a higher learner.lr; more held-out prompts narrow the standard error",
    "worse": "try a lower learner.lr, or check that the reward scores what the held-out answers check",
}


@dataclass(frozen=True)
class Verdict:
    kind: str  # "learns", "worse", "sharpens", "not learning", or "too early" (fewer than two evaluations)
    step0: int = 0
    acc0: float = 0.0
    step1: int = 0
    acc1: float = 0.0
    se: float = 0.0  # the standard error of acc1 - acc0
    paired: bool = False  # the s.e. from per-prompt outcomes (paired), not the two binomial s.e.s
    prompts: int | None = None
    zero_var: float | None = None  # mean share of generated groups whose rollouts scored alike
    solved: str | None = None  # of those: "none solved" (mostly all wrong) or "all solved" (mostly all right)
    entropy: tuple[float, float] | None = None  # (early, recent) mean entropy of updated steps

    @property
    def change(self) -> float:
        return self.acc1 - self.acc0

    @property
    def z(self) -> float:
        """The change in standard errors (inf when the s.e. is 0 and something moved; 0 when nothing did)."""
        if self.se > 0:
            return self.change / self.se
        return 0.0 if self.change == 0 else math.copysign(math.inf, self.change)

    def text(self) -> str:
        if self.kind == "too early":
            return "verdict: too early to say (fewer than two held-out evaluations)"
        how = "paired per prompt" if self.paired else "from the two evaluations' binomial s.e."
        over = f" over {self.prompts} prompts" if self.prompts else ""
        z = "" if not math.isfinite(self.z) else f", {abs(self.z):.1f} s.e."
        moved = (f"held-out accuracy {self.acc0:.3f} (step {self.step0}) -> {self.acc1:.3f} (step {self.step1}), "
                 f"{self.change:+.3f}")
        se = f"s.e. of the change {self.se:.3f}{over}, {how}"
        if self.kind == "learns":
            return f"verdict: learning: {moved}, beyond {MOVED_SE:g} standard errors ({se}{z})"
        parts = [f"verdict: {self.kind}: {moved}, "
                 + (f"down beyond {MOVED_SE:g} standard errors ({se}{z})" if self.kind == "worse"
                    else f"within {MOVED_SE:g} standard errors ({se}{z})")]
        if self.zero_var is not None:
            parts.append(self._zero_var_text())
        if self.kind == "sharpens":
            early, recent = self.entropy
            parts.append(f"entropy fell {early:.2f} -> {recent:.2f} ({recent / early:.0%} of its start): the run "
                         "sharpens what the model already does")
        parts.append(TRY[self._cause()])
        return "; ".join(parts)

    def _zero_var_text(self) -> str:
        share = f"{self.zero_var:.0%} of groups taught nothing (their rollouts scored alike)"
        if self.zero_var < MOSTLY_EQUAL or self.solved is None:
            return share
        what = ("the model solves almost none of these prompts" if self.solved == "none solved"
                else "the model already solves almost all of these prompts")
        return f"{share}: {what}"

    def _cause(self) -> str:
        if self.kind in ("worse", "sharpens"):
            return self.kind
        if self.zero_var is not None and self.zero_var >= MOSTLY_EQUAL and self.solved:
            return self.solved
        return "flat"


def binomial_se(acc: float, prompts: int) -> float:
    """The standard error of an accuracy over `prompts` prompts: sqrt(p (1 - p) / n)."""
    return math.sqrt(acc * (1 - acc) / prompts) if prompts > 0 else 0.0


def change_se(se0: float, se1: float, bits0=None, bits1=None) -> tuple[float, bool]:
    """(the standard error of acc1 - acc0, paired). With both evaluations' per-prompt results (0/1 or shares,
    the same prompts in the same order), the paired s.e.: the standard deviation of the per-prompt
    differences over sqrt(n). Otherwise the two s.e.s in quadrature (independent samples: wider)."""
    if bits0 is not None and bits1 is not None and len(bits0) == len(bits1) and len(bits0) > 1:
        d = np.asarray(bits1, float) - np.asarray(bits0, float)
        return float(d.std(ddof=1) / math.sqrt(len(d))), True
    return math.hypot(se0, se1), False


def zero_var_share(rows: list[dict]) -> float | None:
    """The mean share of generated groups whose rollouts all scored alike, over the trained steps' rows."""
    shares = [r["zero_var_frac_gen"] for r in rows if r.get("step") and isinstance(r.get("zero_var_frac_gen"), float)]
    return float(np.mean(shares)) if shares else None


def solved_side(rows: list[dict], equal: tuple[int, int] | None = None) -> str | None:
    """Whether the equal groups were mostly all wrong ("none solved") or all right ("all solved"): from
    `equal` = (all wrong, all right) counts when the trainer tallied them, else from the mean reward of the
    generated rollouts (binary rewards: equal groups below one half are all wrong ones in the main)."""
    if equal is not None and sum(equal):
        return "none solved" if equal[0] >= equal[1] else "all solved"
    rewards = [r["reward_mean"] for r in rows if r.get("step") and isinstance(r.get("reward_mean"), (int, float))]
    if not rewards:
        return None
    return "none solved" if float(np.mean(rewards)) < 0.5 else "all solved"


def entropy_levels(rows: list[dict]) -> tuple[float, float] | None:
    """(early, recent) mean entropy over EARLY updated steps each, once there are 2 * EARLY of them."""
    ent = [r["entropy"] for r in rows if r.get("step") and r.get("updated", 1) and not r.get("skipped")
           and isinstance(r.get("entropy"), float)]
    if len(ent) < 2 * EARLY:
        return None
    return float(np.mean(ent[:EARLY])), float(np.mean(ent[-EARLY:]))


def verdict(rows: list[dict], outcomes: dict[int, np.ndarray] | None = None, prompts: int | None = None,
            equal: tuple[int, int] | None = None) -> Verdict:
    """The verdict of a run from its metrics rows so far. `outcomes`: {step: per-prompt greedy results} (from
    eval_outcomes.jsonl, `read_outcomes`); `prompts`: the held-out count; `equal`: (all wrong, all right)
    counts of equal groups if tallied."""
    evals = [r for r in rows if isinstance(r.get("eval_acc"), (int, float))]
    if len(evals) < 2:
        return Verdict("too early")
    first, last = evals[0], evals[-1]
    outcomes = outcomes or {}
    se, paired = change_se(float(first.get("eval_se") or 0.0), float(last.get("eval_se") or 0.0),
                           outcomes.get(first["step"]), outcomes.get(last["step"]))
    if paired:
        prompts = prompts or len(outcomes[last["step"]])
    change = last["eval_acc"] - first["eval_acc"]
    moved = abs(change) > MOVED_SE * se
    levels = entropy_levels(rows)
    if moved:
        kind = "learns" if change > 0 else "worse"
    elif levels is not None and levels[0] > 0 and levels[1] < SHARPEN * levels[0]:
        kind = "sharpens"
    else:
        kind = "not learning"
    return Verdict(kind, first["step"], float(first["eval_acc"]), last["step"], float(last["eval_acc"]), se, paired,
                   prompts, zero_var_share(rows), solved_side(rows, equal), levels)


def read_outcomes(run_dir: str | Path) -> dict[int, np.ndarray]:
    """{step: per-prompt greedy results (0/1)} from a run's eval_outcomes.jsonl (none if absent; a resumed run's
    repeated step: the last line holds; a damaged line is skipped: the verdict then falls back to the s.e.s)."""
    from .evaluate import OUTCOMES, unpack_outcomes

    path = Path(run_dir) / OUTCOMES
    out: dict[int, np.ndarray] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
            bits = unpack_outcomes(rec, int(rec["prompts"]))
        except (ValueError, KeyError, TypeError):
            continue
        if "greedy" in bits:
            out[int(rec["step"])] = bits["greedy"]
    return out


def run_verdict(run_dir: str | Path) -> Verdict:
    """The verdict of a run directory (its metrics.jsonl and eval_outcomes.jsonl)."""
    from .records import rows

    return verdict(rows(run_dir), read_outcomes(run_dir))
