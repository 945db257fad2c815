"""DOTS: difficulty-targeted online data selection (+ rollout replay as a `finish` hook).

Paper: "Improving Data Efficiency for LLM Reinforcement Fine-tuning Through Difficulty-targeted
Online Data Selection and Rollout Replay", arXiv 2506.05316 (NeurIPS 2025). Code:
ASTRAL-Group/data-efficient-llm-rl, rl_training/verl/verl/trainer/ppo/ray_trainer_teacher_replay.py
L57-150 and L835-1080, teacher_utils.py. Spec: shared/methods/selection-allocation.md §8.

Selection [CODE for the structure, INF where marked]:
  * every selection round (mu steps) a reference set Ref of `ref_size` random training prompts is
    rolled out (n each, purpose "profile", charged to the budget); label y_j = its pass rate.
  * a prompt q's pass rate is predicted by attention over Ref: w_q = softmax(s_qj / tau_att),
    p~_q = sum_j w_qj y_j, then calibrated by a 1-D linear regression p~ -> y fitted on Ref, and
    questions are drawn without replacement with probability prop. to softmax(-|p^_q - alpha| / tau)
    (alpha = 0.5, tau = 1e-3: a near-greedy "closest to 0.5" draw; Gumbel top-k here).
  * [INF] the code's similarity s_qj = <P_q(e_q), P_r(e_j)> / sqrt(d) uses MLP projections
    pre-trained offline on prompts with known pass rates, plus a learned calibration MLP. rollwise has
    no such regressor, so s_qj = cos(e_q - m, e_j - m) with m the mean Ref embedding (a
    Nadaraya-Watson estimator), and the regression p~ -> y is fitted on leave-one-out p~ of Ref (an
    in-sample p~ would match each Ref prompt to itself). Embeddings are the current policy's
    mean-pooled last hidden state (`ctx.prompt_stats`, prefill charged to
    `ledger.prompt_tokens`), not a frozen external model's.
  * [INF, cost] the code scores the whole pool every round (O(pool)); here `select` ranks the
    `oversample x need` random candidates the Planner draws (O(batch)), i.e. "closest to alpha among
    a random sample" instead of "among all".
Rollout replay [CODE structure; done here as allocate + finish]:
  * per step sigma x B fresh prompts are rolled out; the other (1 - sigma) x B slots train on groups
    drawn uniformly from a buffer of recent groups (latest copy per prompt; prompts rolled out fresh
    this step are not replayed). The buffer gets this step's fresh groups after the update and is
    trimmed to the newest (buffer_size - sigma x B). The lowest-ranked selected prompts get n = 0 in
    `allocate` (the Planner drops them) and `finish` appends the replayed groups.
  * bug fixed (spec §8 (f)): the official code's "remove all-0/all-1 groups from the buffer" line is
    commented out, so zero-variance groups get replayed; rollwise keeps them out (the intent).
  * replayed rollouts keep their behaviour log-probs mu and policy_version; the paper's loss
    (ratio pi/mu clipped around pi_old/mu) is the learner's business: pick a `--correction`
    (e.g. TIS); with "none" they are treated as on-policy after pi_old is recomputed.
  * sigma = 1 turns replay off (selection only).
  * [API limit] the Planner's refill (DAPO / GRESO dynamic sampling) counts only this step's fresh
    groups, so `dots+dapo` refills the replay slots with fresh prompts: use sigma = 1 with a refill
    component. An API change that would help: let `finish`-added groups count toward the refill
    target (e.g. a `reserved(ctx) -> int` hook: slots a component fills without generation).
Defaults [CODE final_ds_teacher_replay.sh: B = 512, mu = 2, ref_size = 256, alpha = 0.5, tau = 1e-3,
sigma = 0.5, buffer_size = 512], scaled to the embedded B = 32 by keeping the ratios to B:
ref_size = 16 (B/2), buffer_size = 32 (B); mu, alpha, tau, sigma unchanged. [INF] tau_att = 0.1,
oversample = 4.
"""
from __future__ import annotations


import numpy as np

from ..core.registry import register
from ..core.types import Batch, Group, Prompt, Request, Rollout
from .base import Component, StepContext
from .capabilities import HoldsBack, PromptStats


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _softmax(s: np.ndarray) -> np.ndarray:
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def predict_pass_rate(emb_q: np.ndarray, emb_ref: np.ndarray, y_ref: np.ndarray, tau_att: float) -> np.ndarray:
    """Attention over the reference set, then the linear calibration fitted on leave-one-out Ref
    predictions. Returns p^ in [0, 1] per query row."""
    y = np.asarray(y_ref, dtype=np.float64)
    m = emb_ref.mean(0, keepdims=True)
    zq, zr = _unit(emb_q - m), _unit(emb_ref - m)
    p_q = _softmax(zq @ zr.T / tau_att) @ y
    if len(y) >= 3:
        s_rr = zr @ zr.T / tau_att
        np.fill_diagonal(s_rr, -np.inf)
        p_loo = _softmax(s_rr) @ y
        var = p_loo.var()
        if var > 1e-12:
            b = float(((p_loo - p_loo.mean()) * (y - y.mean())).mean() / var)
            a = float(y.mean() - b * p_loo.mean())
        else:
            a, b = float(y.mean()), 0.0
        p_q = a + b * p_q
    return np.clip(p_q, 0.0, 1.0)


@register("planner", "dots", provenance="CODE+INF",
          summary="DOTS: attention-predicted pass rate from a rolled-out reference set, pick closest to 0.5; rollout replay")
class DOTS(Component):
    declares = (PromptStats(), HoldsBack())
    needs_sampling = True  # the reference set
    needs_policy = True  # prompt embeddings

    def __init__(self, mu: int = 2, ref_size: int = 16, n_ref: int | None = None, alpha: float = 0.5,
                 tau: float = 1e-3, tau_att: float = 0.1, oversample: int = 4, sigma: float = 0.5,
                 buffer_size: int = 32, buffer_drop_zero_variance: bool = True):
        if mu < 1 or ref_size < 2 or tau <= 0 or tau_att <= 0 or oversample < 1 or not 0 < sigma <= 1 or buffer_size < 0:
            raise ValueError("dots: need mu >= 1, ref_size >= 2, tau > 0, tau_att > 0, oversample >= 1, 0 < sigma <= 1, buffer_size >= 0")
        self.mu, self.ref_size, self.n_ref = int(mu), int(ref_size), n_ref
        self.alpha, self.tau, self.tau_att = float(alpha), float(tau), float(tau_att)
        self.oversample, self.sigma = int(oversample), float(sigma)
        self.buffer_size, self.buffer_drop_zv = int(buffer_size), bool(buffer_drop_zero_variance)
        self.ref_ids: list[int] = []
        self.ref_y: list[float] = []
        self.age = 0  # steps since the reference set was measured
        self._last_step: int | None = None
        self.buffer: list[Group] = []  # oldest first
        self._replay_k = 0
        self._replayed: set[int] = set()  # id() of Group objects appended by finish this step
        self.pred: dict[int, float] = {}  # this step's predictions (for metrics)

    # ---- reference set -------------------------------------------------------------------
    def begin_step(self, ctx: StepContext) -> None:
        if self._last_step is not None and self._last_step != ctx.step:
            self.age += 1
        self._last_step = ctx.step

    def refresh_reference(self, ctx: StepContext):
        """Roll out a fresh random reference set (purpose "profile", generated by the driver)."""
        N = len(ctx.pool)
        k = min(self.ref_size, N)
        ids: list[int] = []
        seen: set[int] = set()
        while len(ids) < k:  # O(k) draw without replacement, whatever the pool size
            for i in ctx.rng.integers(0, N, size=2 * (k - len(ids))):
                i = int(i)
                if i not in seen and len(ids) < k:
                    seen.add(i)
                    ids.append(i)
        n = int(self.n_ref or ctx.n)
        groups = yield [Request(ctx.pool[i], n, purpose="profile") for i in ids]
        by_id: dict[int, list[int]] = {}
        for g in groups:
            c = by_id.setdefault(g.prompt.id, [0, 0])
            c[0] += g.num_correct
            c[1] += g.n
        self.ref_ids = [i for i in ids if by_id.get(i, [0, 0])[1] > 0]
        self.ref_y = [by_id[i][0] / by_id[i][1] for i in self.ref_ids]
        self.age = 0
        ctx.metrics["dots_ref_mean"] = float(np.mean(self.ref_y)) if self.ref_y else float("nan")

    # ---- selection -----------------------------------------------------------------------
    def select(self, candidates: list[Prompt], need: int, ctx: StepContext):
        if not candidates:
            return candidates
        if not self.ref_ids or self.age >= self.mu:  # lazily, after the step's first draw (as before)
            yield from self.refresh_reference(ctx)
        if len(self.ref_ids) < 2:
            return candidates
        if ctx.prompt_stats is None:
            raise RuntimeError("dots: needs ctx.prompt_stats (prompt embeddings from the policy)")
        texts = [p.text for p in candidates] + [ctx.pool[i].text for i in self.ref_ids]
        _, emb = ctx.prompt_stats(texts)
        emb = np.asarray(emb, dtype=np.float64)
        k = len(candidates)
        p_hat = predict_pass_rate(emb[:k], emb[k:], np.asarray(self.ref_y), self.tau_att)
        for p, v in zip(candidates, p_hat):
            self.pred[p.id] = float(v)
        order = self.rank(p_hat, ctx.rng)
        return [candidates[i] for i in order]

    def rank(self, p_hat: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A draw without replacement prop. to softmax(-|p^ - alpha| / tau) (Gumbel top-k), as an order."""
        logits = -np.abs(np.asarray(p_hat, dtype=np.float64) - self.alpha) / self.tau
        g = -np.log(-np.log(np.clip(rng.random(len(logits)), 1e-300, 1 - 1e-16)))
        return np.argsort(-(logits + g), kind="stable")

    # ---- rollout replay ------------------------------------------------------------------
    def _replayable(self, exclude: set[int]) -> dict[int, Group]:
        latest: dict[int, Group] = {}
        for g in self.buffer:  # oldest first, so the latest copy wins
            if g.prompt.id not in exclude:
                latest[g.prompt.id] = g
        return latest

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        if self.sigma >= 1.0 or ctx.groups or not prompts:
            return ns  # refill rounds and replay-off: fresh only
        avail = len(self._replayable({p.id for p in prompts}))
        k = min(len(prompts) - int(np.ceil(self.sigma * len(prompts))), avail)
        self._replay_k = max(0, k)
        if self._replay_k == 0:
            return ns
        keep = len(prompts) - self._replay_k
        return [x if i < keep else 0 for i, x in enumerate(ns)]

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        k, self._replay_k = self._replay_k, 0
        if k <= 0:
            return groups
        cand = list(self._replayable({g.prompt.id for g in groups}).values())
        if not cand:
            return groups
        pick = ctx.rng.choice(len(cand), size=min(k, len(cand)), replace=False)
        replayed = [cand[int(i)] for i in sorted(pick)]
        self._replayed = {id(g) for g in replayed}
        ctx.metrics["replayed"] = ctx.metrics.get("replayed", 0.0) + len(replayed)
        # replayed groups go first: a refill planner trains on the first B accepted groups, and a
        # replayed group that was cut would have its (already trained) rollouts reclassified
        return replayed + list(groups)

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        if self.sigma < 1.0:
            fresh = [g for g in groups if g.n > 0 and id(g) not in self._replayed
                     and not (self.buffer_drop_zv and g.zero_variance)]
            self.buffer.extend(fresh)
            keep = max(0, self.buffer_size - int(round(self.sigma * ctx.batch_size)))
            self.buffer = self.buffer[-keep:] if keep > 0 else []
        self._replayed = set()
        self.pred = {}
        ctx.metrics["dots_buffer"] = float(len(self.buffer))

    # ---- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "ref_ids": [int(i) for i in self.ref_ids], "ref_y": [float(y) for y in self.ref_y],
            "age": self.age, "last_step": self._last_step, "replay_k": self._replay_k,
            "buffer": [{"prompt": {"id": g.prompt.id, "text": g.prompt.text, "answer": g.prompt.answer,
                                   "level": g.prompt.level},
                        "rollouts": [r.to_state() for r in g.rollouts]} for g in self.buffer],
        }

    def load_state_dict(self, state: dict) -> None:
        self.ref_ids = [int(i) for i in state["ref_ids"]]
        self.ref_y = [float(y) for y in state["ref_y"]]
        self.age = int(state["age"])
        self._last_step = None if state["last_step"] is None else int(state["last_step"])
        self._replay_k = int(state["replay_k"])
        self.buffer = [Group(Prompt(**b["prompt"]), [Rollout.from_state(r) for r in b["rollouts"]])
                       for b in state["buffer"]]
        self._replayed = set()
