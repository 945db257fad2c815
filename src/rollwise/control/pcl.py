"""PCL: prompt curriculum learning with a learned pass-rate predictor (no pre-rollouts).

Paper: Gao, Kim, Sun, Joachims, Wang, Pang, Tan, "Prompt Curriculum Learning for Efficient LLM
Post-Training", arXiv 2510.01135 (ICLR 2026). No official code and no paper body were in the stored
sources: the rule is from the abstract [ABS] and from secondary summaries of the paper (emergentmind's
topic pages, the OpenReview reviews that restate the algorithm) [SEC]; the rest is rollwise's [INF].

Rule::

    each step: draw a pool of k x m candidate prompts                                       [SEC]
    predict each candidate's pass rate V(x) with a value model, one forward pass, no rollouts  [ABS+SEC]
    train on the m candidates whose V(x) is closest to the target tau = 0.5 (greedy)          [SEC]
    after the step, fit V to the observed pass rates of the trained prompts by mean squared
    error (V is one step behind the policy: "acceptable since each update is small")           [SEC]

Why 0.5 [ABS]: prompts of intermediate difficulty give the largest gradients and the most non-zero
advantages; PCL finds them without the rollouts a filter (DAPO, SPEED-RL) spends, 12.1x and 16.9x faster
than rollout-based filtering on MATH and DeepScaleR.

rollwise's value model [INF]. The paper's is a separate model (a transformer with a small MLP head,
often the policy's size, trained alongside it). Here it is a ridge-regression head on the *policy's own*
prompt embedding: V(x) = clip(b + w . z(x), 0, 1), z the mean-pooled last hidden state of the current
policy over the prompt (`ctx.prompt_stats`, the same prefill pass DOTS and HIVE use), standardised by the
replay's mean and std. After each step the head is refit exactly (closed form, float64) on the last
`buffer` (z, pass rate) labels: minimise mean (y - b - w . z)^2 + l2 |w|^2. A closed form has no random
draws and no learning rate, so runs and resumes are exact; the replay window is how it stays near the
current policy (labels older than buffer / m steps fall out). The embedding moves with the policy, so
the head reads the current policy's view of a prompt, as the paper's concurrently-trained model does.

What it costs, charged honestly:
  * the k x m candidates' prefill (`ctx.prompt_stats`) every draw: the driver charges their prompt tokens
    to `ledger.scoring_tokens` (priced as prefill by bench/costs.py), the analogue of the paper's value
    model forward over its pool (which, being a separate model of the policy's size, costs about the same);
  * the head itself (a D-vector, refit on at most `buffer` cached embeddings) is not charged, as ARRoL's
    head is not (core/ledger.py `work`): ~D x buffer flops a step, below 1e-6 of a decoded token's. The
    paper's value model *training* (a forward and backward of a transformer over m prompts a step) has
    no counterpart here: rollwise's PCL is cheaper than the paper's by that much, and says so.

Details [INF]:
  * a cold head (no labels yet) predicts 0.5 for every prompt: the ranking is then the draw order, so the
    first step is a uniform draw;
  * ties in |V - tau| keep the draw order (a stable sort over an already random draw);
  * labels are the trained groups' pass rates (fraction of correct rollouts; the paper's mean reward for
    0/1 rewards), one per group, from the fresh train groups of the step whose candidates were scored;
  * defaults: k = 4 (the paper's k is not in the stored summaries), tau = 0.5 [SEC], l2 = 0.1,
    buffer = 256 labels (8 steps of the embedded batch of 32).
Step metrics: pcl/pred_mean (mean V of the prompts chosen), pcl/abs_err (mean |V - observed pass rate|
of the trained prompts, with the prediction that chose them: the head's honest accuracy), pcl/labels.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np

from ..core import schema
from ..core.registry import register
from ..core.schema import Float, Int, Rule, at_least, checked, finite
from ..core.types import Batch, Group, Prompt
from .base import Component, StepContext
from .capabilities import PromptStats


@checked
@dataclass(frozen=True)
class PCLOptions:
    """PCL's options, checked by core/schema.py (one line naming the bad one)."""

    k: Annotated[Int, at_least(1, "candidates scored per prompt trained")] = 4
    tau: Annotated[Float, Rule(lambda v: 0 <= v <= 1, "in [0, 1] (the target pass rate)")] = 0.5
    l2: Annotated[Float, finite(0, strict=True)] = 0.1
    buffer: Annotated[Int, at_least(1, "labels the head is fit on")] = 256


class PassRateHead:
    """V(x) = clip(b + w . (e - mu) / sd, 0, 1): ridge regression refit exactly, in float64, on a replay of the
    last `buffer` (embedding, pass rate) labels. No labels: 0.5 for everything."""

    def __init__(self, l2: float, buffer: int):
        self.l2, self.buffer = float(l2), int(buffer)
        self.X_ND = np.zeros((0, 0))
        self.y_N = np.zeros(0)
        self.w_D: np.ndarray | None = None
        self.b, self.mu_D, self.sd_D = 0.5, None, None

    def predict(self, e_KD) -> np.ndarray:
        e = np.asarray(e_KD, dtype=np.float64)
        if self.w_D is None:
            return np.full(len(e), 0.5)
        return np.clip(self.b + ((e - self.mu_D) / self.sd_D) @ self.w_D, 0.0, 1.0)

    def update(self, e_ND, y_N) -> None:
        e = np.asarray(e_ND, dtype=np.float64)
        if not len(e):
            return
        self.X_ND = np.concatenate([self.X_ND.reshape(-1, e.shape[1]), e])[-self.buffer:]
        self.y_N = np.concatenate([self.y_N, np.asarray(y_N, dtype=np.float64)])[-self.buffer:]
        self.fit()

    def fit(self) -> None:
        X, y = self.X_ND, self.y_N
        n, d = X.shape
        self.mu_D, self.sd_D = X.mean(0), np.maximum(X.std(0), 1e-6)  # a constant feature standardises to 0
        Z, yc = (X - self.mu_D) / self.sd_D, y - y.mean()
        self.b = float(y.mean())
        # argmin (1/n) |yc - Z w|^2 + l2 |w|^2; the n x n (dual) system when there are fewer labels than dims
        if d <= n:
            self.w_D = np.linalg.solve(Z.T @ Z / n + self.l2 * np.eye(d), Z.T @ yc / n)
        else:
            self.w_D = Z.T @ np.linalg.solve(Z @ Z.T / n + self.l2 * np.eye(n), yc / n)

    def state_dict(self) -> dict:
        return {"X": self.X_ND.copy(), "y": self.y_N.copy()}

    def load_state_dict(self, s: dict) -> None:
        self.X_ND, self.y_N = np.asarray(s["X"], dtype=np.float64), np.asarray(s["y"], dtype=np.float64)
        self.w_D, self.b, self.mu_D, self.sd_D = None, 0.5, None, None
        if len(self.y_N):
            self.fit()  # the fit is a function of the replay alone


@register("planner", "pcl", provenance="ABS+SEC+INF",
          summary="PCL: a head on the policy's prompt embedding predicts each candidate's pass rate (no "
                  "rollouts); train the k-times-oversampled candidates closest to tau = 0.5; refit online")
class PCL(Component):
    declares = (PromptStats(),)
    needs_policy = True  # prompt embeddings (ctx.prompt_stats)

    def __init__(self, k: int = 4, tau: float = 0.5, l2: float = 0.1, buffer: int = 256):
        o = schema.build(PCLOptions, {"k": k, "tau": tau, "l2": l2, "buffer": buffer}, where="pcl", prefix=True)
        self.oversample, self.tau = o.k, o.tau
        self.head = PassRateHead(o.l2, o.buffer)
        self._emb: dict[int, np.ndarray] = {}  # this step's scored candidates: prompt id -> embedding
        self._pred: dict[int, float] = {}  # and their predictions

    def rank(self, v_K: np.ndarray) -> np.ndarray:
        """Candidates closest to tau first; ties keep the draw order."""
        return np.argsort(np.abs(np.asarray(v_K, dtype=np.float64) - self.tau), kind="stable")

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        if not candidates:
            return candidates
        if ctx.prompt_stats is None:
            raise RuntimeError("pcl: needs ctx.prompt_stats (prompt embeddings from the policy)")
        _, emb = ctx.prompt_stats([p.text for p in candidates])  # the driver charges this prefill
        emb = np.asarray(emb, dtype=np.float64)
        v = self.head.predict(emb)
        for p, e, x in zip(candidates, emb, v):
            self._emb[p.id], self._pred[p.id] = e, float(x)
        order = self.rank(v)
        chosen = order[:need]
        ctx.metrics["pcl/pred_mean"] = float(v[chosen].mean())
        return [candidates[i] for i in order]

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        ids, ys = [], []
        for g in groups:
            if g.n > 0 and g.prompt.id in self._emb:
                ids.append(g.prompt.id)
                ys.append(float(g.pass_rate))
        ctx.metrics["pcl/labels"] = float(len(ys))
        if ys:
            ctx.metrics["pcl/abs_err"] = float(np.mean([abs(self._pred[i] - y) for i, y in zip(ids, ys)]))
            self.head.update(np.stack([self._emb[i] for i in ids]), ys)
        self._emb, self._pred = {}, {}

    def state_dict(self) -> dict:
        return {"head": self.head.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self._emb, self._pred = {}, {}
