"""Learning dynamics of the simulated policy: the batch the planner assembles moves the logits.

Equations (per step t, after the planner's batch is final; B = the configured batch size, i.e. the
groups the learner wants, so a step that trains on fewer informative groups learns less):

    for each trained group g of prompt i = i(g), cluster k = c(i), with n_g samples, c_g correct:
        q_g = c_g / n_g
        u_g = (n_g / n_ref) * mean_j |r_j - q_g| = (n_g / n_ref) * 2 q_g (1 - q_g)

    u_g is the group's mean-centred |advantage| mass (binary rewards). It is exactly 0 for a
    zero-variance group (q_g in {0, 1}): such groups never move the policy, whatever else is in the
    batch. It is largest at q = 1/2 and grows with the group size.

    G     <- G + (eta_global / B) * sum_g u_g                                  (transfer to all)
    s_k   <- s_k + (eta_cluster / B) * sum_{g : c(i(g)) = k} u_g               (transfer in cluster)
    theta_i <- theta_i(t) + eta_prompt * u_g                                   (the prompt itself)

Saturation (optional, `saturation` = sigma): with m = (1/B) sum_g u_g the step's mean signal per batch
slot, every u_g above is scaled by

    sigma / sqrt(m^2 + sigma^2)        (~1 for m << sigma; the step's total tends to sigma * B for m >> sigma)

A model of an Adam-like optimiser: its step size is normalised, so a batch with more informative groups
points the step better (a smaller share of noise) rather than making it longer in proportion. sigma = inf
(the default) is the linear model; the `tiny` profile fits sigma to runs of planners whose batches carry
different amounts of signal (GRPO, DAPO, the oracle).

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
    saturation: float = float("inf")  # mean signal per batch slot past which a step stops growing


class Dynamics:
    def __init__(self, pop: Population, cfg: DynamicsConfig | None = None):
        self.pop, self.cfg = pop, cfg or DynamicsConfig()
        pop.theta_decay = float(self.cfg.forget_prompt)

    @staticmethod
    def signal(n: np.ndarray, correct: np.ndarray, n_ref: int) -> np.ndarray:
        """u_g = (n_g / n_ref) * 2 q_g (1 - q_g); 0 for zero-variance (and empty) groups."""
        n = np.asarray(n, dtype=np.float64)
        c = np.asarray(correct, dtype=np.float64)
        q = np.divide(c, n, out=np.zeros_like(n), where=n > 0)
        return (n / n_ref) * 2.0 * q * (1.0 - q)

    def update(self, step: int, prompt_ids, n, correct, batch_size: int) -> dict:
        """Apply one step's learning (the trained groups) and forgetting. O(len(prompt_ids) + K)."""
        pop, cfg = self.pop, self.cfg
        ids = np.asarray(prompt_ids, dtype=np.int64)
        u = self.signal(n, correct, cfg.n_ref)
        B = max(int(batch_size), 1)
        informative = u > 0
        if informative.any():
            ids, u = ids[informative], u[informative]
            if np.isfinite(cfg.saturation):
                m = float(u.sum()) / B
                u = u * (cfg.saturation / np.hypot(m, cfg.saturation))
            if len(np.unique(ids)) != len(ids):  # one group per prompt is the norm; be safe anyway
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
