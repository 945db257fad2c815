"""CurES: "CurES: From Gradient Analysis to Efficient Curriculum Learning for Reasoning LLMs"
(Zeng, Sun et al., ICLR 2026, arXiv 2510.01037; code ZexuSun/CurES, module `epic`).

The prompt sampling distribution sets the convergence rate and the rollout allocation sets the
gradient variance; a Beta posterior per prompt makes both cheap to estimate.

Rule [CODE: epic/stage_0_init_difficulty_sample_size.py, epic/epic_sampler.py,
epic/epic_ray_trainer.py ~L990-1170, runs/scripts/run_epic.sh]::

    counts per prompt: Accepted (correct responses) and All -> Beta(Accepted + 1, All - Accepted + 1)
    p_hat = (Accepted + 1) / (All + 2)
    init: n_min (4) rollouts of each prompt before it is used -> counts       (ledger "profile")
    sampling: weight(x) ∝ exp( sqrt(p_hat (1 - p_hat)) / t_x )
    quota:    n_x ∝ sigma_x,  sigma_x^2 = a b^2 E[g_c^2] + a^2 b E[g_w^2] - a^2 b^2 (E[g_c] - E[g_w])^2
              (a = p_hat, b = 1 - p_hat; g = grad-norm of log p(y|x) wrt the embeddings)
    after rollout: Accepted/All += per-response correctness

Deviations (all flagged [INF]):
  * Sampling temperature. As released t_x = (Accepted + 1) / 0.01 >= 100, so the weights differ
    by at most 0.5% (exp(0.5/100)): a uniform sampler (the spec flags this as a bug). rollwise
    does the intended thing, a sampler that favours medium difficulty (the paper's stated aim,
    [SEC: papernotes]): t_x = tau = 0.1, so a p_hat = 0.5 prompt outweighs a p_hat = 0.1 one by
    exp(2) ~ 7x. alpha_temperature=True with tau=100 reproduces the release exactly; the
    paper's closed form was not read.
  * Sampling is O(batch): the planner draws `oversample` * need uniform candidates (epoch-wise)
    and CurES keeps `need` of them by weighted sampling without replacement (Gumbel top-k), instead
    of one weighted draw over the whole dataset (O(pool) per step).
  * Init profiling is lazy: a candidate never seen gets its n_min profile rollouts when first
    drawn (the code profiles each 10-step data chunk up front with the current model; over an
    epoch the cost is the same, and the estimate is fresher).
  * sigma_x. sigma="grad" computes the code's formula at a prompt's init profiling: a = share
    correct of the n_min responses, b = 1 - a, g = ||grad of log p(y|x)|| wrt the first parameter
    whose name contains `grad_param` (the code: embed_tokens; rollwise's TinyGPT: wte), one
    backward per profile response through ctx.policy.response_logprobs (so it needs the policy); it is then static, as in
    the code within a chunk. The default sigma="bernoulli" [INF] assumes E[g_c] = E[g_w] and
    E[g_c^2] = E[g_w^2], which reduces the formula to sigma_x ∝ sqrt(p_hat (1 - p_hat)) with the
    *current* posterior (no backward passes; also works without a policy, e.g. the simulator).
    A Policy.grad_norms(prompts, responses, params) hook would make the grad mode engine-agnostic.
  * Quota budget: the code normalises n_x over a whole chunk (B * n_max duplicates of 4 responses
    each). rollwise normalises within the batch and spends the same number of responses as GRPO
    (n per prompt on average): n_x = clip(round(n |batch| sigma_x / sum sigma), n_lo, n_hi).
    The code's pad-to-#GPUs step has no counterpart here.
  * The code updates the counters only when DAPO filtering is on (off in run_epic.sh); the spec's
    rule (update after every rollout) is what rollwise does. Correctness is Rollout.correct (the
    code thresholds the reward at 0.5).

Defaults: n_min (init) = 4 [CODE]; tau = 0.1, oversample = 2, n_lo = 2, n_hi = 4n = 32,
sigma = "bernoulli" [INF].
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.registry import register
from ..core.types import Batch, Group, Prompt, Request
from .base import Component, StepContext
from .capabilities import SetsN


def posterior_mean(accepted, total) -> np.ndarray:
    """p_hat = E[Beta(Accepted + 1, All - Accepted + 1)]."""
    return (np.asarray(accepted, np.float64) + 1.0) / (np.asarray(total, np.float64) + 2.0)


def sampling_logits(accepted, total, tau: float, alpha_temperature: bool) -> np.ndarray:
    p = posterior_mean(accepted, total)
    t = tau * (np.asarray(accepted, np.float64) + 1.0) if alpha_temperature else tau
    return np.sqrt(p * (1.0 - p)) / t


def quotas(p_hat, budget: int, n_lo: int, n_hi: int, sigma=None) -> np.ndarray:
    """n_x = clip(round(budget * sigma_x / sum sigma), n_lo, n_hi); sigma_x = sqrt(p (1 - p)) unless
    given (NaN entries fall back to it)."""
    p = np.asarray(p_hat, np.float64)
    bern = np.sqrt(p * (1.0 - p))
    sigma = bern if sigma is None else np.where(np.isnan(sigma), bern, np.asarray(sigma, np.float64))
    if sigma.sum() <= 0:
        return np.full(len(p), n_lo, dtype=np.int64)
    return np.clip(np.round(budget * sigma / sigma.sum()), n_lo, n_hi).astype(np.int64)


def grad_sigma(correct, g) -> float:
    """The code's sigma_x (stage_0 init_sample_size, "eq. 127"): a = share correct, b = 1 - a,
    sigma^2 = a b^2 E[g_c^2] + a^2 b E[g_w^2] - a^2 b^2 (E[g_c] - E[g_w])^2; an empty class counts
    as g = [0], as in the code."""
    correct = np.asarray(correct, bool)
    g = np.asarray(g, np.float64)
    a = correct.mean() if len(correct) else 0.0
    b = 1.0 - a
    gc = g[correct] if correct.any() else np.zeros(1)
    gw = g[~correct] if (~correct).any() else np.zeros(1)
    var = a * b * b * np.mean(gc ** 2) + a * a * b * np.mean(gw ** 2) - a * a * b * b * (gc.mean() - gw.mean()) ** 2
    return float(np.sqrt(max(var, 0.0)))


def response_grad_norms(policy, rollouts, param_match: str) -> np.ndarray:
    """||d log p(y|x) / d theta|| per rollout, theta = the first parameter named like param_match."""
    params = [p for n, p in policy.model.named_parameters() if param_match in n][:1]
    if not params:
        raise ValueError(f"cures: no policy parameter matches {param_match!r}")
    out = []
    for r in rollouts:
        if r.num_tokens == 0:
            out.append(0.0)
            continue
        logp, _, mask = policy.response_logprobs([list(r.prompt_ids)], [r.token_ids_T.tolist()])
        (grad,) = torch.autograd.grad(-(logp * mask).sum(), params, allow_unused=True)
        out.append(0.0 if grad is None else float(grad.norm()))
    return np.array(out)


@register("planner", "cures", provenance="CODE+INF",
          summary="CurES: Beta-posterior prompt sampling toward medium difficulty + quotas ∝ sigma_x")
class CurES(Component):
    declares = (SetsN(),)

    def __init__(self, init_rollouts: int = 4, tau: float = 0.1, alpha_temperature: bool = False,
                 oversample: int = 2, n_lo: int = 2, n_hi: int | None = None, sigma: str = "bernoulli",
                 grad_param: str | None = None):
        if init_rollouts < 0 or tau <= 0 or oversample < 1 or n_lo < 1 or (n_hi is not None and n_hi < n_lo):
            raise ValueError("cures: need init_rollouts >= 0, tau > 0, oversample >= 1, 1 <= n_lo <= n_hi")
        if sigma not in ("bernoulli", "grad"):
            raise ValueError(f"cures: sigma must be 'bernoulli' or 'grad', not {sigma!r}")
        self.sigma_mode, self.grad_param = sigma, grad_param
        self.init_rollouts, self.tau, self.alpha_temperature = int(init_rollouts), float(tau), bool(alpha_temperature)
        self.oversample, self.n_lo, self.n_hi = int(oversample), int(n_lo), n_hi
        self.accepted: np.ndarray | None = None
        self.total: np.ndarray | None = None
        self.sigma: np.ndarray | None = None  # sigma="grad": per prompt, NaN = not measured

    @property
    def needs_sampling(self) -> bool:  # the init profile
        return self.init_rollouts > 0

    @property
    def needs_policy(self) -> bool:  # per-response gradients
        return self.sigma_mode == "grad"

    def bind(self, pool_size: int) -> None:
        self.accepted = np.zeros(pool_size, np.int64)
        self.total = np.zeros(pool_size, np.int64)
        self.sigma = np.full(pool_size, np.nan, np.float32)

    def measure_sigma(self, groups: list[Group], policy) -> None:
        match = self.grad_param or ("wte" if getattr(policy, "kind", "") == "tiny" else "embed_tokens")
        for g in groups:
            norms = response_grad_norms(policy, g.rollouts, match)
            self.sigma[g.prompt.id] = grad_sigma([r.correct for r in g.rollouts], norms)

    def count(self, groups: list[Group]) -> None:
        for g in groups:
            self.accepted[g.prompt.id] += g.num_correct
            self.total[g.prompt.id] += g.n

    # ---- hooks ---------------------------------------------------------------------------------
    def select(self, candidates: list[Prompt], need: int, ctx: StepContext):
        if not candidates:
            return candidates
        unseen = [p for p in candidates if self.total[p.id] == 0]
        if unseen and self.init_rollouts > 0:
            profiled = yield [Request(p, self.init_rollouts, purpose="profile") for p in unseen]
            self.count(profiled)
            if self.sigma_mode == "grad":
                if ctx.policy is None:
                    raise RuntimeError("cures: sigma='grad' needs ctx.policy")
                self.measure_sigma(profiled, ctx.policy)
            ctx.metrics["cures/profiled"] = ctx.metrics.get("cures/profiled", 0.0) + len(unseen)
        ids = np.array([p.id for p in candidates], dtype=np.int64)
        logits = sampling_logits(self.accepted[ids], self.total[ids], self.tau, self.alpha_temperature)
        keys = logits + ctx.rng.gumbel(size=len(ids))  # Gumbel top-k = weighted sampling w/o replacement
        return [candidates[i] for i in np.argsort(-keys, kind="stable")]

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        if not prompts:
            return ns
        ids = np.array([p.id for p in prompts], dtype=np.int64)
        p_hat = posterior_mean(self.accepted[ids], self.total[ids])
        sigma = self.sigma[ids] if self.sigma_mode == "grad" else None
        out = quotas(p_hat, ctx.n * len(prompts), self.n_lo, self.n_hi or 4 * ctx.n, sigma)
        ctx.metrics["cures/p_hat_mean"] = float(p_hat.mean())
        return [int(k) for k in out]

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        self.count(groups)

    def state_dict(self) -> dict:
        return {"accepted": None if self.accepted is None else self.accepted.copy(),
                "total": None if self.total is None else self.total.copy(),
                "sigma": None if self.sigma is None else self.sigma.copy()}

    def load_state_dict(self, s: dict) -> None:
        self.accepted = None if s["accepted"] is None else np.asarray(s["accepted"], np.int64).copy()
        self.total = None if s["total"] is None else np.asarray(s["total"], np.int64).copy()
        self.sigma = None if s.get("sigma") is None else np.asarray(s["sigma"], np.float32).copy()
