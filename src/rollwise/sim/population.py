"""Population model: prompts with latent difficulty and skill clusters, a policy whose success
probability on each prompt moves as it learns, and per-rollout outcomes, lengths and entropies.

Everything is numpy, vectorised and seeded. Per-prompt arrays are allocated once (a few bytes per
prompt: 10^7 prompts is ~200 MB); everything a step does is O(prompts in the step), never O(pool).

The model (i = prompt, k = c(i) its skill cluster, t = step = policy version)
-------------------------------------------------------------------------------
Static, drawn once per prompt from the population stream:

    c(i)   ~ Uniform{0..K-1}                       skill cluster
    d_i    ~ Normal(0, diff_sd)                    latent difficulty
    mu_i   = log(median_len) + len_prompt_sd * zeta_i + len_diff_slope * d_i / diff_sd
             zeta_i ~ Normal(0, 1)                 the prompt's typical log length
    P_i    ~ Uniform{prompt_len_min..prompt_len_max}   prompt tokens

Policy state (logits), see `dynamics.py` for how it moves:

    G(t)        global skill              (G(0) = skill0)
    s_k(t)      skill of cluster k        (s_k(0) ~ Normal(0, cluster_sd))
    theta_i(t)  what the policy memorised of prompt i itself (0 until the prompt is trained)

Success probability of one rollout of prompt i at step t:

    z_i(t) = G(t) + s_{c(i)}(t) + theta_i(t) - d_i,      p_i(t) = sigmoid(z_i(t))

Per rollout j of a group of prompt i (n_g samples drawn together):

    correct_j ~ Bernoulli(p_i(t))
    log L_j   = mu_i + len_group_sd * eta_g + len_sample_sd * eps_j + wrong_len * (1 - correct_j)
                eta_g ~ Normal(0, 1) shared by the group's samples (lengths of one prompt's samples
                are correlated: corr = len_group_sd^2 / (len_group_sd^2 + len_sample_sd^2)),
                eps_j ~ Normal(0, 1)
    L_j       = clip(ceil(exp(log L_j)), 1, max_len); a rollout cut at max_len finishes with
                reason "length" and is wrong (no final answer)
    H_j       = entropy0 * exp(entropy_sd * nu_j) * (1 + wrong_entropy * (1 - correct_j))
                * exp(-entropy_decay * (G(t) - G(0)))      (entropy collapses as the policy sharpens)

So lengths are lognormal (a long right tail), wrong answers are exp(wrong_len) times longer in
median, and the draws of one call are a pure function of the generator's state.

Accuracy figures are *expected* success probabilities (no sampling noise): held-out accuracy is the
mean p over a fixed sample of fresh prompts drawn from the same population (theta = 0: they were
never trained on); pool accuracy is the mean p over a fixed sample of train-pool prompts. The greedy
held-out accuracy (what a greedy-decoding evaluation measures) is the fraction of held-out prompts
with p > greedy_threshold (1/2 by default; lower when greedy decoding beats sampling, as on the tiny
model, whose greedy accuracy is ~0.47 while its T = 1 reward is ~0.3).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class PopulationConfig:
    clusters: int = 16
    diff_sd: float = 2.5  # spread of latent difficulty (logits): many prompts near p = 0 or p = 1
    cluster_sd: float = 0.75  # spread of initial cluster skills
    skill0: float = 0.0  # initial global skill
    median_len: float = 600.0  # median response tokens of a typical prompt (right answers)
    len_prompt_sd: float = 0.35  # per-prompt spread of the typical log length
    len_diff_slope: float = 0.2  # harder prompts (+1 sd of difficulty) are exp(0.2) longer
    len_group_sd: float = 0.25  # shared by one prompt's samples in one call (correlation)
    len_sample_sd: float = 0.45  # per sample
    wrong_len: float = 0.35  # wrong answers are exp(0.35) = 1.42x longer in median
    max_len: int = 8192
    prompt_len_min: int = 60
    prompt_len_max: int = 400
    entropy0: float = 0.6
    entropy_sd: float = 0.2
    wrong_entropy: float = 0.25
    entropy_decay: float = 0.3
    # Greedy decoding solves a prompt when its T = 1 success probability exceeds this: below 1/2 when
    # greedy beats sampling (it takes the likeliest token at every step of a multi-token answer).
    greedy_threshold: float = 0.5
    heldout: int = 4096  # held-out prompts (fresh, same population) for final_acc
    pool_probe: int = 4096  # fixed sample of pool prompts for pool_acc


class Population:
    """Static prompt attributes plus the policy state (logits) and the per-rollout draws."""

    def __init__(self, num_prompts: int, cfg: PopulationConfig | None = None, seed: int = 0):
        self.cfg = cfg = cfg or PopulationConfig()
        if num_prompts < 1 or cfg.clusters < 1:
            raise ValueError("sim: need at least one prompt and one cluster")
        self.num_prompts = N = int(num_prompts)
        ss = np.random.SeedSequence([int(seed), 0x51D])
        pop_ss, held_ss, probe_ss = ss.spawn(3)
        rng = np.random.default_rng(pop_ss)
        K = cfg.clusters
        # per-prompt static attributes (allocated once; float32/int32 to keep 10^7 prompts cheap)
        self.cluster = rng.integers(0, K, N, dtype=np.int32)
        self.difficulty = (rng.standard_normal(N, dtype=np.float32) * cfg.diff_sd).astype(np.float32)
        zeta = rng.standard_normal(N, dtype=np.float32)
        self.log_len = (np.log(cfg.median_len) + cfg.len_prompt_sd * zeta
                        + cfg.len_diff_slope * self.difficulty / max(cfg.diff_sd, 1e-9)).astype(np.float32)
        del zeta
        self.prompt_len = rng.integers(cfg.prompt_len_min, cfg.prompt_len_max + 1, N, dtype=np.int32)
        # policy state
        self.skill0 = float(cfg.skill0)
        self.G = float(cfg.skill0)
        self.s0 = rng.standard_normal(K) * cfg.cluster_sd
        self.s = self.s0.copy()
        self.theta = np.zeros(N, np.float32)  # memorised part, decays lazily (dynamics.py)
        self.theta_step = np.zeros(N, np.int32)  # step of theta's last update
        self.theta_decay = 0.0  # per-step decay factor of theta is (1 - theta_decay); set by Dynamics
        # held-out prompts: fresh draws from the same population (never trained: theta = 0)
        hr = np.random.default_rng(held_ss)
        self.held_cluster = hr.integers(0, K, cfg.heldout, dtype=np.int32)
        self.held_difficulty = hr.standard_normal(cfg.heldout) * cfg.diff_sd
        pr = np.random.default_rng(probe_ss)
        self.probe_ids = pr.choice(N, size=min(cfg.pool_probe, N), replace=False).astype(np.int64)

    # ---- the policy -----------------------------------------------------------------------
    def theta_at(self, ids: np.ndarray, step: int) -> np.ndarray:
        """theta_i(t) = theta_i(tau_i) * (1 - lambda_p) ** (t - tau_i) (lazy forgetting, O(len(ids)))."""
        th = self.theta[ids].astype(np.float64)
        if self.theta_decay > 0:
            dt = np.maximum(step - self.theta_step[ids], 0)
            th *= (1.0 - self.theta_decay) ** dt
        return th

    def logits(self, ids, step: int) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        return self.G + self.s[self.cluster[ids]] + self.theta_at(ids, step) - self.difficulty[ids]

    def success_prob(self, ids, step: int) -> np.ndarray:
        return _sigmoid(self.logits(ids, step))

    def heldout_acc(self, greedy: bool = False) -> float:
        """Mean success probability over the held-out prompts, or with greedy=True the fraction whose
        success probability exceeds `greedy_threshold`: a model of greedy decoding, which is what the
        tiny model's evaluation measures."""
        z = self.G + self.s[self.held_cluster] - self.held_difficulty
        if greedy:
            t = self.cfg.greedy_threshold
            return float((z > np.log(t / (1 - t))).mean())
        return float(_sigmoid(z).mean())

    def pool_acc(self, step: int) -> float:
        return float(self.success_prob(self.probe_ids, step).mean())

    # ---- rollouts -------------------------------------------------------------------------
    def draw(self, ids: np.ndarray, ns: np.ndarray, step: int, rng: np.random.Generator):
        """Draw the rollouts of groups (ids[g], ns[g] samples). Returns per-sample arrays
        (group index, correct, length, entropy, truncated) and the per-group success probability."""
        c = self.cfg
        R = len(ids)
        T = int(ns.sum())
        gidx = np.repeat(np.arange(R, dtype=np.int64), ns)
        p = self.success_prob(ids, step)
        correct = rng.random(T) < p[gidx]
        wrong = ~correct
        logl = (self.log_len[ids].astype(np.float64) + c.len_group_sd * rng.standard_normal(R))[gidx]
        logl += c.len_sample_sd * rng.standard_normal(T)
        logl += c.wrong_len * wrong
        length = np.ceil(np.exp(np.minimum(logl, 30.0)))
        truncated = length >= c.max_len
        length = np.clip(length, 1, c.max_len).astype(np.int64)
        if truncated.any():
            correct &= ~truncated
            wrong = ~correct
        ent = c.entropy0 * np.exp(c.entropy_sd * rng.standard_normal(T) - c.entropy_decay * (self.G - self.skill0))
        ent *= 1.0 + c.wrong_entropy * wrong
        return gidx, correct, length, ent, truncated, p


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-np.asarray(z, dtype=np.float64)))
