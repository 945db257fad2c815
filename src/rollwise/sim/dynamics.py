"""Learning dynamics of the simulated policy: the batch the planner assembles moves the logits.

Equations (per step t, after the planner's batch is final; B = the configured batch size, i.e. the
groups the learner wants, so a step that trains on fewer informative groups learns less):

    for each trained group g of prompt i = i(g), cluster k = c(i), with n_g samples, c_g correct:
        q_g = c_g / n_g
        u_g = (n_g / n_ref) * mean_j |r_j - q_g| = (n_g / n_ref) * 2 q_g (1 - q_g)

    u_g is the group's mean-centred |advantage| mass (binary rewards). It is exactly 0 for a
    zero-variance group (q_g in {0, 1}): such groups never move the policy, whatever else is in the
    batch. It is largest at q = 1/2 and grows with the group size.

    With `signal = "std"` the advantages are also divided by the group's reward std, as GRPO's default
    estimator does: u_g = (n_g / n_ref) * mean_j |r_j - q_g| / sqrt(q_g (1 - q_g)) = (n_g / n_ref) * 2
    sqrt(q_g (1 - q_g)). A group with one success in eight then carries 0.66 / 0.22 = 3x the mean-centred
    mass: rare successes count for more, which is what response-reuse planners (AR3PO) manufacture.

    G     <- G + (eta_global / B) * sum_g u_g                                  (transfer to all)
    s_k   <- s_k + (eta_cluster / B) * sum_{g : c(i(g)) = k} u_g               (transfer in cluster)
    theta_i <- theta_i(t) + eta_prompt * u_g                                   (the prompt itself)

Normalisation (`normalize`): "slot" (the default) divides a step by B, the batch slots, as above. With
"rows" it divides by the trained rows instead, as the learner's token-mean loss does (zero-advantage
rows are dropped before the mean): every u_g is scaled by B n_ref / (R + r0), where R = sum_g n_g over
the informative groups. r0 = 0 is a pure per-row mean (a step is as long with 8 informative rows as
with 256); a large r0 brings back "slot" (a step grows with its rows). In between, r0 says how fast a
batch's direction stops being noise as it gains rows, the signal-to-noise of a stochastic gradient.

Forgetting:

    G   <- G   - forget * (G - G(0))          every step (O(1))
    s_k <- s_k - forget * (s_k - s_k(0))      every step (O(K))
    theta_i(t) = theta_i(tau_i) * (1 - forget_prompt) ** (t - tau_i)
                 (evaluated lazily when prompt i is read, tau_i = its last update: O(batch))

The learning signal is the usual policy-gradient one: every informative sample pushes the policy
toward what solved the prompt, the prompt itself gets the largest share (memorisation: it matters
when the pool is small and prompts return often), prompts of the same skill cluster get part of it
(transfer), all prompts a little (general skill). Updates saturate by themselves: as p -> 0 or 1 the
groups turn zero-variance and u_g -> 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .population import Population


@dataclass
class DynamicsConfig:
    eta_global: float = 0.004
    eta_cluster: float = 0.12
    eta_prompt: float = 0.6
    n_ref: int = 16
    forget: float = 0.0005  # per step, toward the initial skills
    forget_prompt: float = 0.002  # per step, of what was memorised of a prompt
    signal: str = "mean"  # "mean": mean-centred |advantage| mass (Dr. GRPO); "std": GRPO's std-normalised
    normalize: str = "slot"  # "slot": a step is divided by B; "rows": by the informative rows (+ rows_r0)
    rows_r0: float = 0.0  # with normalize="rows": rows of noise a step needs to reach half its length


class Dynamics:
    def __init__(self, pop: Population, cfg: DynamicsConfig | None = None):
        self.pop, self.cfg = pop, cfg or DynamicsConfig()
        pop.theta_decay = float(self.cfg.forget_prompt)

    @staticmethod
    def signal(n: np.ndarray, correct: np.ndarray, n_ref: int, kind: str = "mean") -> np.ndarray:
        """u_g = (n_g / n_ref) * 2 q_g (1 - q_g) ("mean") or (n_g / n_ref) * 2 sqrt(q_g (1 - q_g)) ("std");
        0 for zero-variance (and empty) groups."""
        n = np.asarray(n, dtype=np.float64)
        c = np.asarray(correct, dtype=np.float64)
        q = np.divide(c, n, out=np.zeros_like(n), where=n > 0)
        if kind == "std":
            return (n / n_ref) * 2.0 * np.sqrt(q * (1.0 - q))
        if kind != "mean":
            raise ValueError(f"sim dynamics: signal must be 'mean' or 'std', not {kind!r}")
        return (n / n_ref) * 2.0 * q * (1.0 - q)

    def update(self, step: int, prompt_ids, n, correct, batch_size: int) -> dict:
        """Apply one step's learning (the trained groups) and forgetting. O(len(prompt_ids) + K)."""
        pop, cfg = self.pop, self.cfg
        ids = np.asarray(prompt_ids, dtype=np.int64)
        u = self.signal(n, correct, cfg.n_ref, cfg.signal)
        B = max(int(batch_size), 1)
        informative = u > 0
        if cfg.normalize not in ("slot", "rows"):
            raise ValueError(f"sim dynamics: normalize must be 'slot' or 'rows', not {cfg.normalize!r}")
        if informative.any():
            ids, u = ids[informative], u[informative]
            if cfg.normalize == "rows":
                rows = float(np.asarray(n, dtype=np.float64)[informative].sum())
                u = u * (B * cfg.n_ref / (rows + cfg.rows_r0))
            ordered = np.sort(ids)  # (a sort, not np.unique: this runs every step, and is almost never true)
            if (ordered[1:] == ordered[:-1]).any():  # one group per prompt is the norm; be safe anyway
                ids, inv = np.unique(ids, return_inverse=True)
                u = np.bincount(inv, weights=u)
            pop.G += cfg.eta_global / B * float(u.sum())
            pop.s += cfg.eta_cluster / B * np.bincount(pop.cluster[ids], weights=u, minlength=len(pop.s))
            th = pop.theta_at(ids, step) + cfg.eta_prompt * u
            pop.theta[ids] = th
            pop.theta_step[ids] = step
        if cfg.forget > 0:
            pop.G -= cfg.forget * (pop.G - pop.skill0)
            pop.s -= cfg.forget * (pop.s - pop.s0)
        return {"signal": float(u.sum()) if informative.any() else 0.0,
                "informative_groups": int(informative.sum())}
