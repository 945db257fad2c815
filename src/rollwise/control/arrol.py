"""ARRoL: online rollout pruning with a learned quality head (arXiv 2603.24840, ACL 2026).

The repository (Hsu1023/ARRoL) holds only a README, so nothing here is [CODE]. What the abstract states
[ABS]: a lightweight quality head on the policy's hidden states, trained online, prunes rollouts during
generation and steers the survivors toward balanced correctness; advantages are computed over the
survivors. The target correct ratio rho = 0.5 is from a summary [SEC]. Everything else is [INF]
(rollwise's reference design, the spec's B1), with the paper's unknowns exposed as options::

    allocate:   a prompt asked for G samples starts N = ceil(ratio * G)                         [ABS+INF]
    at the checkpoint (every running row of the request has prune_at tokens; rows of one request
    advance together, so this is one decode step):
        p_i = sigmoid(w . z_i + b)   z_i: standardised h_i, the last layer's hidden state at row i's
                                     last token, read from the engine's decode state (no extra
                                     forward pass)                                              [ABS+INF]
        f = rows already finished (kept: their tokens are spent), m = max(G - f, 0) slots left
        keep the ceil(rho m) highest-p and the floor((1 - rho) m) lowest-p running rows,
        prune the rest (the middle of the ranking; ties by sample index)                          [SEC+INF]
    finish:     the head learns from the survivors' correctness: BCE on (h at the checkpoint, correct)
                over a replay of the last `buffer` labels (h standardised by the replay's mean and
                std), `head_steps` full-batch gradient steps                                       [INF]

  * The spec's "if one side is short, fill from the rows nearest to the threshold" is what ranking does:
    the top ceil(rho m) are the predicted positives, topped up by the highest predicted negatives (and
    the bottom side alike); the two sides never overlap while m < the running rows, the only case that
    prunes. A cold head (zero weights) scores every row 0.5: the survivors are then the first and last
    rows by index, which for exchangeable samples is a uniform subset.
  * Pruned rows are dropped from their group and the loss (status and fate "pruned"; the driver charges
    their tokens to fate "pruned"); advantages and every planner filter see the survivors only [ABS].
    No importance weight corrects the survivor selection (the paper's point is to bias the groups
    toward balance; the spec gives no correction) [INF]. PromptHistory records the survivors only.
  * Only the first-round requests this component allocated are expanded and pruned; stages another
    component adds (`more`, e.g. AR3PO's) run as asked. A request whose rows all end before prune_at
    tokens is never pruned and trains with all N rows (set prune_at for the task's response lengths).
  * The head's labels come from survivors, which the rule chose by their scores. The spec recommends
    also finishing a random share of the rows it prunes as unbiased labels [SEC: spec; INF how]: with
    `explore` > 0 each row the rule would prune runs on instead with that probability; it is labelled,
    and it trains with its group (an ordinary on-policy sample: the group then has more than G rows).
    Draws are seeded like DUET's: Uniform from (a base drawn once from the planner's stream and
    checkpointed, step, wave of the step, request of the wave, sample); explore = 0 draws nothing.
  * The head's figures are measured on those labels, with the scores that made the decision (before this
    step's update). The rule ranks rather than thresholds, so "predicted correct" is the high side: the
    ceil(rho k) best-scored of a request's k rows kept by the rule (when it pruned, exactly the rows kept
    for their high score). precision = correct among them, recall = their share of the correct labels
    the rule kept (explored rows excluded), auc = P(a correct row outscores a wrong one of the same
    prompt) over every label, ties 1/2 (within prompts: the rule only compares rows of one request).
  * The head starts at zero weights and trains by full-batch gradient descent: no random draws, so runs
    and resumes are exact; its weights and replay are in the checkpoint.
  * Step metrics: arrol/rows (rows started in expanded requests), arrol/pruned, arrol/pruned_frac,
    arrol/decided (requests that reached the checkpoint), arrol/explored, arrol/labels, arrol/precision,
    arrol/recall, arrol/auc (each figure only when defined).
  * Needs in-flight control with hidden states (the torch engine; inside TRL its transformers generation,
    through a forward hook on the decoder: integrations/trl.py); refused by name by the vLLM engine, the
    simulator, async mode and verl; does not compose with partial rollouts or
    speculation (SPEC-RL). It composes with DUET's abort (`arrol+duet-abort`, control/base.py Watchers):
    both watch every row; a row DUET prunes before the checkpoint does not fill a slot, and DUET's gate
    goes on watching ARRoL's survivors, so a group may end with fewer than G rows [INF].

Defaults [INF; the paper's N/G, L_p and head are unknown]: ratio = 2 (the embedded n = 8 starts 16),
prune_at = 32 tokens, rho = 0.5 [SEC], a logistic probe (lr 0.5, l2 1e-3, 20 steps per training step,
a replay of 1024 labels), explore = 0 (the spec's "small random fraction" is not given a value).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core.registry import register
from ..core.types import Group, Prompt, Request
from .base import Component, Decision, StepContext
from .capabilities import ScalesN, Watcher, WaveWatch

# what a survivor carries (Rollout.meta) from the checkpoint to finish: h_D, its score, on the high side?
H_KEY, P_KEY, HIGH_KEY = "arrol_h", "arrol_p", "arrol_high"


def survivors(p_B, m: int, rho: float) -> list[int]:
    """Indices of the m rows kept: the ceil(rho m) highest scores and the floor((1 - rho) m) lowest
    (ties by index), in index order. All rows when m >= their number."""
    B = len(p_B)
    if m >= B:
        return list(range(B))
    order = sorted(range(B), key=lambda k: (-float(p_B[k]), k))  # highest first
    hi = math.ceil(rho * m - 1e-9)
    return sorted(order[:hi] + order[B - (m - hi):] if m > hi else order[:hi])


def head_figures(p_N: np.ndarray, high_N: np.ndarray, correct_N: np.ndarray, group_N: np.ndarray,
                 ruled_N: np.ndarray | None = None) -> dict:
    """precision and recall of "high side = predicted correct" over the rows the rule kept (`ruled_N`;
    None: all), and the AUC of the scores over pairs (correct, wrong) of the same group (ties 1/2); each
    only when defined."""
    out = {}
    ruled_N = np.ones(len(p_N), dtype=bool) if ruled_N is None else ruled_N
    high, correct = high_N & ruled_N, correct_N & ruled_N
    if high.any():
        out["arrol/precision"] = float((high & correct).sum() / high.sum())
    if correct.any():
        out["arrol/recall"] = float((high & correct).sum() / correct.sum())
    same_NN = group_N[:, None] == group_N[None, :]
    pairs_NN = same_NN & correct_N[:, None] & ~correct_N[None, :]
    if pairs_NN.any():
        ahead_NN = (p_N[:, None] > p_N[None, :]) + 0.5 * (p_N[:, None] == p_N[None, :])
        out["arrol/auc"] = float(ahead_NN[pairs_NN].mean())
    return out


class QualityHead:
    """A logistic probe p = sigmoid(w . z + b) on standardised hidden states z = (h - mu) / sd, trained by
    full-batch gradient descent on BCE + l2/2 |w|^2 over a replay of the last `buffer` (h, correct) labels.
    mu and sd are the replay's, refreshed at every update (so one lr fits any model's hidden-state scale;
    w carries over as the warm start). Float64, zero-initialised: no random draws."""

    def __init__(self, lr: float, l2: float, steps: int, buffer: int):
        self.lr, self.l2, self.steps, self.buffer = lr, l2, steps, buffer
        self.w_D: torch.Tensor | None = None  # sized by the first labels
        self.b = 0.0
        self.mu_D = self.sd_D = None
        self.X_ND = torch.zeros(0, 0, dtype=torch.float64)
        self.y_N = torch.zeros(0, dtype=torch.float64)

    def prob(self, h_BD: torch.Tensor) -> torch.Tensor:
        if self.w_D is None:
            return torch.full((len(h_BD),), 0.5, dtype=torch.float64)
        return torch.sigmoid((h_BD.to(torch.float64) - self.mu_D) / self.sd_D @ self.w_D + self.b)

    def update(self, h_ND: torch.Tensor, y_N) -> None:
        h_ND = h_ND.to(torch.float64)
        if self.w_D is None:
            self.w_D = torch.zeros(h_ND.shape[1], dtype=torch.float64)
            self.X_ND = torch.zeros(0, h_ND.shape[1], dtype=torch.float64)
        self.X_ND = torch.cat([self.X_ND, h_ND])[-self.buffer:]
        self.y_N = torch.cat([self.y_N, torch.as_tensor(y_N, dtype=torch.float64)])[-self.buffer:]
        self.mu_D = self.X_ND.mean(0)
        self.sd_D = self.X_ND.std(0, unbiased=False).clamp_min(1e-6)  # a constant feature standardises to 0
        Z, y, n = (self.X_ND - self.mu_D) / self.sd_D, self.y_N, len(self.y_N)
        for _ in range(self.steps):
            err_N = torch.sigmoid(Z @ self.w_D + self.b) - y  # d BCE / d logit
            self.w_D = self.w_D - self.lr * (Z.T @ err_N / n + self.l2 * self.w_D)
            self.b = self.b - self.lr * float(err_N.mean())

    def state_dict(self) -> dict:
        return {"w": _numpy(self.w_D), "b": self.b, "mu": _numpy(self.mu_D), "sd": _numpy(self.sd_D),
                "X": _numpy(self.X_ND), "y": _numpy(self.y_N)}

    def load_state_dict(self, s: dict) -> None:
        self.w_D, self.mu_D, self.sd_D, self.X_ND, self.y_N = (_f64(s[k]) for k in ("w", "mu", "sd", "X", "y"))
        self.b = float(s["b"])


@register("planner", "arrol", provenance="ABS+SEC+INF",
          summary="ARRoL: start N > G rows, prune mid-generation by a learned head on hidden states toward "
                  "a target correct ratio rho among the G survivors")
class ARRoL(Component):
    declares = (ScalesN(), Watcher(hidden=True))  # prunes in flight by a head on the samples' hidden states

    def __init__(self, ratio: float = 2.0, prune_at: int = 32, rho: float = 0.5, lr: float = 0.5,
                 l2: float = 1e-3, head_steps: int = 20, buffer: int = 1024, explore: float = 0.0):
        if not _is_num(ratio) or ratio < 1:
            raise ValueError(f"arrol: need ratio >= 1 (rows started per row kept), got {ratio!r}")
        if not _is_int(prune_at) or prune_at < 1:
            raise ValueError(f"arrol: need prune_at >= 1 (whole tokens), got {prune_at!r}")
        if not _is_num(rho) or not 0 <= rho <= 1:
            raise ValueError(f"arrol: need 0 <= rho <= 1 (the target correct ratio), got {rho!r}")
        if not (_is_num(lr) and lr > 0 and _is_num(l2) and l2 >= 0):
            raise ValueError(f"arrol: need lr > 0 and l2 >= 0, got {lr!r} and {l2!r}")
        if not (_is_int(head_steps) and head_steps >= 0 and _is_int(buffer) and buffer >= 1):
            raise ValueError(f"arrol: need head_steps >= 0 and buffer >= 1 (whole numbers), "
                             f"got {head_steps!r} and {buffer!r}")
        if not _is_num(explore) or not 0 <= explore < 1:
            raise ValueError(f"arrol: need 0 <= explore < 1 (the share of pruned rows run on as labels), "
                             f"got {explore!r}")
        self.ratio, self.prune_at, self.rho, self.explore = float(ratio), int(prune_at), float(rho), float(explore)
        self.head = QualityHead(float(lr), float(l2), int(head_steps), int(buffer))
        self._target: dict[int, int] = {}  # this step: prompt id -> G, for the requests allocated here
        self._base: int | None = None  # the explore draws' seed, drawn once from the planner's stream
        self._waves = 0  # watched waves this step

    def begin_step(self, ctx: StepContext) -> None:
        self._target, self._waves = {}, 0
        if self.explore > 0 and self._base is None:
            self._base = int(ctx.rng.integers(2**62))

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        out = []
        for p, k in zip(prompts, ns):
            if k > 0:
                self._target[p.id] = int(k)
            out.append(math.ceil(k * self.ratio - 1e-9))
        return out

    def watch(self, requests: list[Request], ctx: StepContext) -> "PruneGate":
        targets = [self._target.pop(r.prompt.id, None) if r.purpose == "train" else None for r in requests]
        self._waves += 1
        return PruneGate(self, requests, targets, ctx.metrics, (self._base, ctx.step, self._waves))

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        """Score the head's decisions against the survivors' correctness, then train it on them."""
        m = ctx.metrics
        if m.get("arrol/rows"):
            m["arrol/pruned_frac"] = m.get("arrol/pruned", 0.0) / m["arrol/rows"]
        hs, ps, highs, ys, gs = [], [], [], [], []
        for gi, g in enumerate(ctx.groups.values()):  # this step's fresh train rows (a reused copy has none)
            for r in g.rollouts:
                h, p, high = r.meta.pop(H_KEY, None), r.meta.pop(P_KEY, None), r.meta.pop(HIGH_KEY, None)
                if h is not None:
                    hs.append(h)
                    ps.append(p)
                    highs.append(high)
                    ys.append(float(bool(r.correct)))
                    gs.append(gi)
        m["arrol/labels"] = float(len(ys))
        if ys:
            ruled = np.array([h is not None for h in highs])  # an explored row was not the rule's choice
            m.update(head_figures(np.asarray(ps), np.array([bool(h) for h in highs]), np.asarray(ys) > 0,
                                  np.asarray(gs), ruled))
            self.head.update(torch.stack(hs), ys)
        return groups

    def state_dict(self) -> dict:
        return {"head": self.head.state_dict(), "base": self._base}

    def load_state_dict(self, state: dict) -> None:
        self.head.load_state_dict(state["head"])
        self._base = state.get("base")


class PruneGate(WaveWatch):
    """ARRoL's rule over one wave: the driver shows it each running sample's (tokens, hidden state) after
    every decode step; once every running row of an expanded request has prune_at tokens it keeps m of
    them by the head's scores and prunes the rest (one decision per request)."""

    def __init__(self, rule: ARRoL, requests: list[Request], targets: list[int | None], metrics: dict,
                 key: tuple = ()):
        self.rule, self.requests, self.targets, self.metrics, self.key = rule, requests, targets, metrics, key
        self.decided: set[int] = set()
        self.pruned_elsewhere: dict[int, set[int]] = {}  # request index -> samples another watcher pruned
        self._count("arrol/rows", sum(r.n for r, G in zip(requests, targets) if G is not None))

    def ended_elsewhere(self, i: int, j: int, action: str) -> None:
        """Another in-flight component (composed: `arrol+duet-abort`) ended sample j of request i. A pruned
        sample does not fill one of the G slots; a stopped one (its answer is in) does, like a finished one."""
        if action == "pruned":
            self.pruned_elsewhere.setdefault(i, set()).add(j)

    def __call__(self, running: dict) -> list[Decision]:
        out = []
        for i, samples in running.items():
            if self.targets[i] is None or i in self.decided:
                continue
            live = [(j, s) for j, s in enumerate(samples) if s is not None]
            if live and min(len(toks) for _, (toks, _) in live) >= self.rule.prune_at:
                self.decided.add(i)
                out += self.decide(i, live, len(samples) - len(live) - len(self.pruned_elsewhere.get(i, ())))
        return out

    def decide(self, i: int, live: list, finished: int) -> list[Decision]:
        """Rows `live` = [(sample, (tokens, h_D))] are running, `finished` rows have ended."""
        rule = self.rule
        m = max(self.targets[i] - finished, 0)
        h_BD = torch.stack([h for _, (_, h) in live])
        p_B = rule.head.prob(h_BD)
        keep = survivors(p_B.tolist(), m, rule.rho)
        high = set(sorted(keep, key=lambda k: (-float(p_B[k]), k))[:math.ceil(rule.rho * len(keep) - 1e-9)])
        explored = {k for k, (j, _) in enumerate(live) if k not in keep and rule.explore > 0
                    and np.random.default_rng([*self.key, i, j]).random() < rule.explore}
        self._count("arrol/decided", 1)
        self._count("arrol/pruned", len(live) - len(keep) - len(explored))
        if rule.explore > 0:
            self._count("arrol/explored", len(explored))
        out = []
        for k, (j, _) in enumerate(live):
            if k in keep or k in explored:  # an explored row is a label, not the rule's choice: no side
                meta = {H_KEY: h_BD[k].detach().clone(), P_KEY: float(p_B[k]),
                        HIGH_KEY: (k in high) if k in keep else None}
                out.append(Decision(i, j, "keep", meta=meta))
            else:
                out.append(Decision(i, j, "pruned"))
        return out

    def _count(self, key: str, x: float) -> None:
        self.metrics[key] = self.metrics.get(key, 0.0) + float(x)


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_num(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool) and math.isfinite(x)


def _numpy(t: torch.Tensor | None):
    return None if t is None else t.numpy().copy()


def _f64(a) -> torch.Tensor | None:
    return None if a is None else torch.as_tensor(np.asarray(a), dtype=torch.float64).clone()
