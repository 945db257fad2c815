"""SPEED-RL: "SPEED-RL: Faster Training of Reasoning Models via Online Curriculum Learning" (Zhang,
Arora, Mei, Zanette; UC Berkeley / CMU; arXiv 2506.09016; project page zanette-labs.github.io/speed-rl;
the training code was not in the stored sources, so nothing here is [CODE]). [PAPER] marks what the
authors' own method text says (their project page, its algorithm section read); [SEC] a secondary
summary of the paper.

Selective Prompting with Efficient Estimation of Difficulty: a prompt whose pass rate is near 0 or 1
gives a gradient estimator with a low signal-to-noise ratio ([SEC] the paper's Theorem 3.1: SNR <=
4 N p (1 - p) for RLOO with N samples), so SPEED screens each candidate with a few cheap samples and
spends the full group only on prompts of intermediate difficulty.

Rule::

    screening phase: N_init samples of each candidate                         [PAPER: N_init = 4]
        screen pass rate 0 or 1 -> excluded (not trained this step)           [PAPER]
        otherwise qualified                                                    (p_low < rate < p_high)
    continuation phase: N_cont more samples of each qualified prompt          [PAPER: "N_cont = 20
                                                                               additional completions"]
        the trained group is the N_init screening + the N_cont continuation    [INF from "additional";
        samples (train_screens=True)                                            the text read does not say]
    candidates are screened until B prompts qualify                           [PAPER: low-SNR prompts are
                                                                               excluded "before creating
                                                                               training batches"; INF]

How it maps onto the hooks: `select` screens fresh candidates by yielding
`[Request(p, n_init, purpose="pilot")]` and returns qualified prompts; the planner calls it again while
fewer than B are chosen (at most one pass over the pool per step); `allocate` gives the chosen prompts
N_cont; `finish` puts each prompt's screening samples in front of its continuation (a new Group).

Accounting: screening samples are charged once, as purpose "pilot", when generated. Those of a prompt
that trains are trained with it (fate "trained"); those of an excluded prompt are a measurement
(fate "scored"). With train_screens=False the screening samples only decide (all "scored").

Deviations [INF]:
  * The paper pre-fetches: the screening of the next step's candidates runs in the same inference
    call as this step's continuation, so a screen is one policy update old when its prompt trains.
    rollwise screens in the step that trains (fresher screens, one more engine call per step; the
    rollouts and the ledger are the same). Qualified prompts beyond the B a step needs are kept
    (with their screening samples) for the next step, at most `max_age` steps (then dropped), and are
    served before fresh candidates are screened; a kept screen is a step old, as in the paper.
  * A candidate is screened only while fewer than B qualified prompts are at hand (chosen or kept).
  * Short of B qualified prompts after a full pass over the pool, the step trains on what it has.

Defaults: n_init = 4 [PAPER]; n_cont = n - n_init [INF: the embedded n = 8 gives 4 + 4 = 8 rows per
trained group, the same as GRPO's n; the paper's 4 + 20 = 24 is for long math rollouts]; p_low = 0,
p_high = 1 [PAPER: exclude 0% and 100%]; oversample = 2 candidates per needed prompt, max_age = 1 [INF].
Composes with selectors before it (greso+speed-rl), with trimming after it (speed-rl+pods: the
screening rows are in the group PODS down-samples), with filters (speed-rl+dapo) and in-flight control
(speed-rl+duet-abort, speed-rl+arrol). `compose` refuses by name another component that sets each
prompt's n (knapsack, vip, cures, e3, pods with its own n, ...: a later one overrides n_cont, an earlier
one is overridden by it), a staged sampler (ar3po, aero, dars), arrol before it, and replay.
"""
from __future__ import annotations

from ..core.registry import register
from ..core.types import Batch, Group, Prompt, Request, Rollout
from .base import Component, StepContext, refuse_allocators
from .capabilities import SetsN


@register("planner", "speed-rl", provenance="PAPER+INF",
          summary="SPEED-RL: screen candidates with n_init samples, continue only intermediate pass rates")
class SpeedRL(Component):
    declares = (SetsN(),)
    needs_sampling = True  # screening samples decide which prompts get the full group

    def __init__(self, n_init: int = 4, n_cont: int | None = None, p_low: float = 0.0, p_high: float = 1.0,
                 oversample: int = 2, max_age: int = 1, train_screens: bool = True):
        if n_init < 1 or (n_cont is not None and n_cont < 1):
            raise ValueError("speed-rl: n_init and n_cont must be >= 1")
        if not 0.0 <= p_low < p_high <= 1.0:
            raise ValueError(f"speed-rl: need 0 <= p_low < p_high <= 1, not p_low={p_low}, p_high={p_high}")
        if oversample < 1 or max_age < 0:
            raise ValueError("speed-rl: need oversample >= 1 and max_age >= 0")
        self.n_init, self.n_cont, self.p_low, self.p_high = int(n_init), n_cont, float(p_low), float(p_high)
        self.oversample, self.max_age, self.train_screens = int(oversample), int(max_age), bool(train_screens)
        # qualified prompts not yet trained: prompt id -> {"step": screened at, "rollouts": screening samples}
        self.kept: dict[int, dict] = {}
        self._chosen: dict[int, list[Rollout]] = {}  # this step: prompt id -> its screening samples

    def compose(self, before: list, after: list) -> None:
        """Refused by name: another component that sets each prompt's n (knapsack, vip, cures, ...: one
        would overwrite n_cont or be overwritten by it), a staged sampler (ar3po, aero, dars), arrol before
        it (control/base.py, refuse_allocators), and replay (below)."""
        refuse_allocators(self, before, after)
        for o in before + after:
            if o.name == "replay":
                raise ValueError("speed-rl does not compose with replay: replay holds drawn prompts back with n = 0, "
                                 "but every prompt speed-rl chose is already screened (before speed-rl its n_cont "
                                 "undoes the hold-back; after it the screening samples would never train)")

    def qualifies(self, group: Group) -> bool:
        """The screen: p_low < pass rate < p_high (the paper: neither 0% nor 100% correct)."""
        return group.n > 0 and self.p_low < group.pass_rate < self.p_high

    def begin_step(self, ctx: StepContext) -> None:
        self._chosen = {}

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext):
        taken = set(ctx.groups) | set(self._chosen)
        if len([pid for pid in self.kept if pid not in taken]) < need:  # screen only while short of B
            fresh = [p for p in candidates if p.id not in taken and p.id not in self.kept]
            if fresh:
                screens = yield [Request(p, self.n_init, purpose="pilot") for p in fresh]
                passed = [g for g in screens if self.qualifies(g)]
                for g in passed:
                    self.kept[g.prompt.id] = {"step": int(ctx.step), "rollouts": list(g.rollouts)}
                m = ctx.metrics
                m["speed/screened"] = m.get("speed/screened", 0.0) + len(fresh)
                m["speed/qualified"] = m.get("speed/qualified", 0.0) + len(passed)
        chosen = [pid for pid in self.kept if pid not in taken][:need]  # oldest first
        for pid in chosen:
            self._chosen[pid] = self.kept.pop(pid)["rollouts"]
        ctx.metrics["speed/kept"] = float(len(self.kept))
        return [ctx.pool[pid] for pid in chosen]

    def allocate(self, prompts: list[Prompt], ns: list[int], ctx: StepContext) -> list[int]:
        n_cont = self.n_cont if self.n_cont is not None else max(1, ctx.n - self.n_init)
        return [n_cont if p.id in self._chosen else k for p, k in zip(prompts, ns)]

    def finish(self, groups: list[Group], ctx: StepContext) -> list[Group]:
        if not self.train_screens:
            return groups
        return [Group(g.prompt, list(self._chosen[g.prompt.id]) + list(g.rollouts), dict(g.meta))
                if g.prompt.id in self._chosen else g for g in groups]

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        for pid in [pid for pid, e in self.kept.items() if ctx.step - e["step"] >= self.max_age]:
            del self.kept[pid]  # too old to train next step
        ctx.metrics["speed/kept"] = float(len(self.kept))

    def state_dict(self) -> dict:
        return {"kept": [{"pid": pid, "step": e["step"], "rollouts": [r.to_state() for r in e["rollouts"]]}
                         for pid, e in self.kept.items()],
                "chosen": {pid: [r.to_state() for r in rs] for pid, rs in self._chosen.items()}}

    def load_state_dict(self, s: dict) -> None:
        self.kept = {int(e["pid"]): {"step": int(e["step"]), "rollouts": [Rollout.from_state(d) for d in e["rollouts"]]}
                     for e in s["kept"]}
        self._chosen = {int(pid): [Rollout.from_state(d) for d in rs] for pid, rs in s["chosen"].items()}
