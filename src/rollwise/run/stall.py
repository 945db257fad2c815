"""A run that trains without learning says so: as it happens (a warning line) and when it ends.

Two signs, read from the metrics rows as they are written:
- **Steps with no update**: the learner changed nothing (every advantage was 0, or the planner passed no
  rollouts to train). A new user's GRPO run on their own data made no update on 28 of 78 steps and
  printed only `0.597 -> 0.600`. Warned at the first such step and every `NO_UPDATE_EVERY`-th after.
- **Flat held-out accuracy while entropy collapsed**: the held-out figure is within one standard error
  (`eval_se`) of the first evaluation while the policy's entropy (the learner's, over trained tokens) fell
  below `COLLAPSE` of its level in the first steps. The policy is sharpening what it already does: more
  steps will not help. Warned once, at the evaluation where both hold.

Steps undone for a non-finite loss (`skipped`) have their own warning and stop rule (run/guard.py) and are
not counted here. At the end, `summary()` repeats what held, with what to try.
"""
from __future__ import annotations

import numpy as np

TRY_NO_UPDATE = ("try a larger n (more groups with both right and wrong rollouts), a planner that skips prompts "
                 "the model always or never solves (greso, dapo), a higher temperature, or easier/harder data "
                 "to match the model")
TRY_FLAT = ("try a lower learner.lr (entropy fell fast), a higher temperature, a larger n, or check that the "
            "reward separates right from wrong answers; more held-out prompts narrow the standard error")


class StallWatch:
    COLLAPSE = 0.5  # entropy below this fraction of its early level has collapsed
    EARLY = 3  # updated steps whose mean entropy is the early level (and the recent one)
    NO_UPDATE_EVERY = 10  # warn at the 1st step with no update, then at every 10th

    def __init__(self):
        self.steps = 0  # trained steps seen (skipped ones excluded)
        self.no_update: list[int] = []  # steps whose learner changed nothing
        self.entropy: list[float] = []  # of updated steps
        self.first_eval: tuple[int, float, float] | None = None  # (step, accuracy, standard error)
        self.last_eval: tuple[int, float, float] | None = None
        self.warned_flat = False

    def see(self, row: dict) -> list[str]:
        """The warnings this metrics row raises (none for most rows)."""
        out = []
        step = row.get("step", 0)
        if step and not row.get("skipped"):
            self.steps += 1
            if row.get("updated", 1):
                if isinstance(row.get("entropy"), float):
                    self.entropy.append(row["entropy"])
            else:
                self.no_update.append(step)
                if len(self.no_update) == 1 or len(self.no_update) % self.NO_UPDATE_EVERY == 0:
                    out.append(f"warning: step {step}: no update ({self._why(row)}); {len(self.no_update)} of "
                               f"{self.steps} steps so far made none")
        if isinstance(row.get("eval_acc"), float):
            ev = (step, row["eval_acc"], float(row.get("eval_se") or 0.0))
            self.first_eval = self.first_eval or ev
            self.last_eval = ev
            if not self.warned_flat and self.flat_while_collapsed():
                self.warned_flat = True
                out.append(f"warning: step {step}: {self._flat_text()}")
        return out

    @staticmethod
    def _why(row: dict) -> str:
        if not row.get("batch_rollouts", 1):
            return "the planner passed no rollouts to train"
        return "every advantage was 0: each group's rollouts scored alike"

    def entropy_levels(self) -> tuple[float, float] | None:
        """(early, recent) mean entropy over EARLY updated steps each, once there are enough of them."""
        if len(self.entropy) < 2 * self.EARLY:
            return None
        return float(np.mean(self.entropy[: self.EARLY])), float(np.mean(self.entropy[-self.EARLY:]))

    def flat_while_collapsed(self) -> bool:
        levels = self.entropy_levels()
        if levels is None or self.first_eval is None or self.last_eval[0] == self.first_eval[0]:
            return False
        early, recent = levels
        (_, a0, _), (_, a1, se) = self.first_eval, self.last_eval
        return recent < self.COLLAPSE * early and abs(a1 - a0) <= se

    def _flat_text(self) -> str:
        early, recent = self.entropy_levels()
        (s0, a0, _), (s1, a1, se) = self.first_eval, self.last_eval
        return (f"held-out accuracy has not moved ({a0:.3f} at step {s0} -> {a1:.3f} at step {s1}, within one "
                f"standard error {se:.3f}) while the policy's entropy collapsed ({early:.2f} -> {recent:.2f}): the "
                f"run sharpens what the model already does instead of learning; {TRY_FLAT}")

    def summary(self) -> list[str]:
        """What held over the whole run, for its end."""
        out = []
        if self.no_update:
            out.append(f"warning: {len(self.no_update)} of {self.steps} steps made no update (first: step "
                       f"{self.no_update[0]}); {TRY_NO_UPDATE}")
        if self.flat_while_collapsed():
            out.append(f"warning: {self._flat_text()}")
        return out
