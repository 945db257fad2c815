"""Pilot-Commit: "Pilot-Commit: Spend Your Rollouts Where It Counts" (Kim, Yang, Yan, Liu;
Databricks / Cornell; code databricks/pilot-commit; the README links no arXiv id).

Spend a small *pilot* budget on many fresh prompts, keep those whose pilot pass rate lies in a
window, and *commit* the bulk of the rollouts only to kept prompts, in a later generation round or
step. The trained group is the stored pilot responses plus the fresh commit responses, one group.

Rule [CODE: recipe/pc/pc_ray_trainer.py L354-760, recipe/pc/utils.py, recipe/pc/replay_buffer.py]::

    each generation round of a step:
        C = buffer.sample(min(B - committed, |buffer|))   # "max_variance": pilot std desc, then newest
        P = gen_ratio * (B - committed) fresh prompts -> n_pilot pilot responses each
        pilot mean m:  m > 1 - p_upper -> too correct;  m < p_lower -> too hard (stays in the pool);
                       else -> buffer[x] = (pilot responses, step)
                       m >= p_solve -> x is excluded from all later epochs
        commit: n_commit fresh responses for each x in C; group = pilot responses (max-variance
                downsampled to n_pilot_keep if smaller) + commit responses
    stop at B committed prompts or max_gen_rounds rounds; flush entries older than max_off_steps

How it maps onto the planner hooks: `select` runs one round per call (the planner calls it again
while fewer than B prompts are chosen), piloting the fresh candidates by yielding
`[Request(p, n_pilot, purpose="pilot")]` to the driver and returning the committed buffer prompts;
`allocate` gives those n_commit; `finish` prepends the stored pilot responses to each committed
group; `observe` flushes stale buffer entries.

Deviations / inferred parts:
  * [INF] Pilots are generated in their own engine call (a yielded request), not fused with the commit
    call as in the code; the rollouts and the ledger are the same, wall-clock differs.
  * [INF] Short of B committed prompts after max_gen_rounds the code raises; rollwise trains on
    what it has (as rollwise's DAPO does).
  * [INF] The code never enforces its buffer `max_size`; rollwise evicts the oldest entry.
  * Pilot responses are up to max_off_steps stale and are mixed in *without* an importance
    correction, as in the code (verl recomputes old_log_prob). Each keeps its policy_version and
    purpose "pilot" (they were charged as pilot when generated).

Defaults. [CODE] p_lower 0.125, p_upper 0.25, p_solve 1.0, max_gen_rounds 10, max_off_steps 4,
strategy max_variance, gen_ratio G_gen/B: the code uses 3 with n_pilot/n_commit = 32/96 (baseline
n = 128), so that pilot and commit spend the same tokens. [INF, scaled to the embedded default
n = 8]: n_pilot = n_commit = 4 (train group = 8 = the baseline n; a 2-response pilot could not
resolve the keep window 0.125 <= m <= 0.75) and gen_ratio = 2, which keeps the code's per-step
generation at 1.5x GRPO's (pilot 2B*4 + commit B*4 = 1.5 * B*8).
"""
from __future__ import annotations


import numpy as np

from ..core.registry import register
from ..core.types import Batch, Group, Prompt, Request, Rollout
from .base import Component, StepContext
from .capabilities import SetsN


# ---- helpers shared by the allocation components (AERO imports this) -------------------------------
def max_variance_subset(rewards, m: int, rng: np.random.Generator) -> np.ndarray:
    """Indices of a size-m subset with the largest reward variance.

    For 0/1 rewards this is the code's `_maxvar_downsample_binary`: about half 1s and half 0s
    (m // 2 ones when there are enough, the rest zeros; topped up from the other class when one is
    short). For general rewards the max-variance subset takes the j lowest and m - j highest values
    for some j (an extreme subset); the j closest to m/2 wins ties. Equal rewards are drawn at
    random (rng)."""
    r = np.asarray(rewards, dtype=np.float64)
    n = len(r)
    if m >= n:
        return np.arange(n)
    if m <= 0:
        return np.zeros(0, dtype=np.int64)
    perm = rng.permutation(n)  # random tie-breaking among equal rewards
    order = perm[np.argsort(r[perm], kind="stable")]
    s = r[order]
    if np.all((s == 0) | (s == 1)):
        ones, zeros = order[s == 1], order[s == 0]
        need_ones = m // 2
        need_zeros = m - need_ones
        if len(ones) < need_ones:
            need_ones, need_zeros = len(ones), m - len(ones)
        elif len(zeros) < need_zeros:
            need_zeros, need_ones = len(zeros), m - len(zeros)
        # `ones` is sorted low->high with random ties; all equal, so take from a fresh permutation
        return np.sort(np.concatenate([rng.permutation(ones)[:need_ones], rng.permutation(zeros)[:need_zeros]]))
    best, best_j = -1.0, 0
    for j in range(m + 1):  # j lowest + (m - j) highest
        sub = np.concatenate([s[:j], s[n - (m - j):]])
        v = float(sub.var())
        if v > best + 1e-12 or (abs(v - best) <= 1e-12 and abs(j - m / 2) < abs(best_j - m / 2)):
            best, best_j = v, j
    return np.sort(np.concatenate([order[:best_j], order[n - (m - best_j):]]))


@register("planner", "pilot-commit", provenance="CODE+INF",
          summary="Pilot-Commit: cheap pilot rollouts pick informative prompts; commit the bulk to them")
class PilotCommit(Component):
    declares = (SetsN(),)
    needs_sampling = True  # pilots: samples that decide which prompts get the commit

    def __init__(self, n_pilot: int = 4, n_commit: int = 4, n_pilot_keep: int | None = None,
                 p_lower: float = 0.125, p_upper: float = 0.25, p_solve: float | None = 1.0,
                 gen_ratio: int = 2, max_gen_rounds: int = 10, max_off_steps: int = 4,
                 strategy: str = "max_variance", max_size: int = 100_000):
        if n_pilot < 1 or n_commit < 1:
            raise ValueError("pilot-commit: n_pilot and n_commit must be >= 1")
        if n_pilot_keep is not None and not 0 <= n_pilot_keep <= n_pilot:
            raise ValueError("pilot-commit: need 0 <= n_pilot_keep <= n_pilot")
        if strategy not in ("max_variance", "random", "most_recent"):
            raise ValueError(f"pilot-commit: unknown strategy {strategy!r}")
        if gen_ratio < 1 or max_gen_rounds < 1 or max_off_steps < 0 or max_size < 1:
            raise ValueError("pilot-commit: need gen_ratio, max_gen_rounds, max_size >= 1, max_off_steps >= 0")
        self.n_pilot, self.n_commit = int(n_pilot), int(n_commit)
        self.n_pilot_keep = self.n_pilot if n_pilot_keep is None else int(n_pilot_keep)
        self.p_lower, self.p_upper, self.p_solve = float(p_lower), float(p_upper), p_solve
        self.oversample = int(gen_ratio)  # the planner draws gen_ratio candidates per needed prompt
        self.max_gen_rounds, self.max_off_steps = int(max_gen_rounds), int(max_off_steps)
        self.strategy, self.max_size = strategy, int(max_size)
        # buffer: prompt id -> {"step", "mean", "std", "rollouts"}; dict order = insertion order
        self.buffer: dict[int, dict] = {}
        self.excluded: np.ndarray | None = None  # bool per pool prompt (sized by bind)
        self._rounds = 0
        self._commits: dict[int, list[Rollout]] = {}  # this step: prompt id -> stored pilot rollouts

    # ---- pure rule pieces (unit-tested) --------------------------------------------------------
    def classify(self, mean: float) -> str:
        """'too_correct' | 'too_incorrect' | 'keep' (utils.select_prompts)."""
        if mean > 1.0 - self.p_upper:
            return "too_correct"
        if mean < self.p_lower:
            return "too_incorrect"
        return "keep"

    def sample_buffer(self, k: int, rng: np.random.Generator, skip=()) -> list[int]:
        """Pop k prompt ids from the buffer by the prompt strategy (replay_buffer.sample)."""
        avail = [pid for pid in self.buffer if pid not in skip]
        if k <= 0 or not avail:
            return []
        if len(avail) <= k:
            chosen = avail
        elif self.strategy == "random":
            chosen = [avail[i] for i in rng.choice(len(avail), size=k, replace=False)]
        elif self.strategy == "most_recent":
            chosen = sorted(avail, key=lambda p: self.buffer[p]["step"], reverse=True)[:k]
        else:  # max_variance: pilot std first, then the newer entry
            chosen = sorted(avail, key=lambda p: (self.buffer[p]["std"], self.buffer[p]["step"]), reverse=True)[:k]
        for pid in chosen:
            self._commits[pid] = self.buffer.pop(pid)["rollouts"]
        return chosen

    def add_pilots(self, groups: list[Group], step: int) -> dict[str, int]:
        """Classify pilot groups; keep the informative ones in the buffer; exclude solved ones."""
        counts = {"keep": 0, "too_correct": 0, "too_incorrect": 0, "excluded": 0}
        for g in groups:
            if g.n == 0:
                continue
            r = np.array([float(x.correct) for x in g.rollouts])
            mean = float(r.mean())
            c = self.classify(mean)
            counts[c] += 1
            if c == "keep":
                self.buffer.pop(g.prompt.id, None)
                self.buffer[g.prompt.id] = {"step": int(step), "mean": mean, "std": float(r.std()),
                                            "rollouts": list(g.rollouts)}
                while len(self.buffer) > self.max_size:
                    self.buffer.pop(next(iter(self.buffer)))
            if self.p_solve is not None and mean >= self.p_solve and self.excluded is not None:
                self.excluded[g.prompt.id] = True
                counts["excluded"] += 1
        return counts

    def flush(self, step: int) -> int:
        old = [pid for pid, e in self.buffer.items() if step - e["step"] > self.max_off_steps]
        for pid in old:
            del self.buffer[pid]
        return len(old)

    # ---- hooks ---------------------------------------------------------------------------------
    def bind(self, pool_size: int) -> None:
        self.excluded = np.zeros(pool_size, dtype=bool)

    def begin_step(self, ctx: StepContext) -> None:
        self._rounds, self._commits = 0, {}

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext):
        if self._rounds >= self.max_gen_rounds:
            return []
        self._rounds += 1
        # commit first, from what the buffer held before this round's pilots (as the code does)
        chosen = self.sample_buffer(min(need, len(self.buffer)), ctx.rng, skip=ctx.groups)
        fresh = [p for p in candidates if not self.excluded[p.id] and p.id not in ctx.groups]
        counts = {}
        if fresh:  # the driver generates, charges and scores the pilots, and sends their groups back
            groups = yield [Request(p, self.n_pilot, purpose="pilot") for p in fresh]
            counts = self.add_pilots(groups, ctx.step)
        m = ctx.metrics
        m["pc/rounds"] = float(self._rounds)
        m["pc/piloted"] = m.get("pc/piloted", 0.0) + len(fresh)
        for k, v in counts.items():
            m[f"pc/{k}"] = m.get(f"pc/{k}", 0.0) + v
        m["pc/committed"] = m.get("pc/committed", 0.0) + len(chosen)
        m["pc/buffer"] = float(len(self.buffer))
        return [ctx.pool[pid] for pid in chosen]

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        return [self.n_commit if p.id in self._commits else k for p, k in zip(prompts, ns)]

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        out = []
        for g in groups:
            pilots = self._commits.get(g.prompt.id)
            if pilots is None:
                out.append(g)
                continue
            if self.n_pilot_keep < len(pilots):
                idx = max_variance_subset([float(r.correct) for r in pilots], self.n_pilot_keep, ctx.rng)
                pilots = [pilots[i] for i in idx]
            out.append(Group(g.prompt, list(pilots) + list(g.rollouts)))
        return out

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        ctx.metrics["pc/evicted"] = float(self.flush(ctx.step))
        ctx.metrics["pc/buffer"] = float(len(self.buffer))
        if self.excluded is not None:
            ctx.metrics["pc/excluded_total"] = float(self.excluded.sum())
        self._commits = {}

    # ---- persistence -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "buffer": [{"pid": pid, "step": e["step"], "mean": e["mean"], "std": e["std"],
                        "rollouts": [r.to_state() for r in e["rollouts"]]} for pid, e in self.buffer.items()],
            "pool_size": -1 if self.excluded is None else len(self.excluded),
            "excluded": np.zeros(0, np.int64) if self.excluded is None else np.flatnonzero(self.excluded),
            "rounds": self._rounds,
            "commits": {pid: [r.to_state() for r in rs] for pid, rs in self._commits.items()},
        }

    def load_state_dict(self, s: dict) -> None:
        self.buffer = {int(e["pid"]): {"step": int(e["step"]), "mean": float(e["mean"]), "std": float(e["std"]),
                                       "rollouts": [Rollout.from_state(d) for d in e["rollouts"]]}
                       for e in s["buffer"]}
        size = int(s["pool_size"])
        self.excluded = None
        if size >= 0:
            self.excluded = np.zeros(size, dtype=bool)
            self.excluded[np.asarray(s["excluded"], dtype=np.int64)] = True
        self._rounds = int(s["rounds"])
        self._commits = {int(pid): [Rollout.from_state(d) for d in rs] for pid, rs in s["commits"].items()}
