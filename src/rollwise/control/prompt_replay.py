"""Prompt Replay: re-ask medium-difficulty prompts (prompts only, fresh on-policy rollouts every time).

Paper: "Prompt Replay", arXiv 2603.21177 (abstract only; title not in the spec). Code:
baroian/GRPO_prompt_replay, open-instruct/open_instruct/grpo_fast.py (`ShufflingIterator`,
~L700-1030). Spec: shared/methods/selection-allocation.md §4.

Rule [CODE]:
  * after a prompt is evaluated: pass_rate[x] = its group's pass rate (the latest overwrites),
    last_step[x] = step; if p_min <= pass_rate <= p_max (and > 0) and reuse[x] < max_reuse, push
    (|pass_rate - 0.5|, pass_rate, reuse[x], x) on a min-heap (ties: lower pass rate, fewer reuses).
  * each step, replay_budget = min(floor(B * frac), B // 2) (hard cap at half the batch). Each replay
    slot pops heap entries until one is valid: rate still in the window; not in flight and not already
    in this step; reuse snapshot unchanged (else a fresh entry is pushed); cooled down,
    step - last_step[x] >= cooldown (else set aside and pushed back); reuse[x] < max_reuse (else
    dropped for good). A valid x is issued as a replay and reuse[x] += 1. Unused slots take fresh
    prompts from the dataset.
  * cooldown jitter +-max(1, round(0.2 c)) [spec §4, CODE per the spec; the two stored snapshots
    of grpo_fast.py read for this file use a fixed cooldown: set cooldown_jitter=0 for that], and the
    optional pass-rate-dependent cooldown c(|p-0.5|) = 5/10/15/20 steps for distances ~0/.1/.2/>=.3
    (`adaptive_cooldown=True`) [spec §4].
"In flight" [INF]: rollwise's loop is synchronous, so a prompt is in flight only between its issue
in `select` and its evaluation in `observe` of the same step; prompts already rolled out this step
(`ctx.groups`, e.g. in a DAPO refill round) are skipped.

Deviation [API]: the Planner draws `need` fresh candidates from its epoch sampler before `select`
sees them, so a step with r replays consumes r fresh prompts that are not rolled out in this epoch
(they come back next epoch). The original draws fresh prompts only for non-replay slots. API change
that would help: a pre-draw hook (`inject(need, ctx) -> list[Prompt]`) so the Planner draws only
need - r fresh prompts, or letting `select` hand unused candidates back to the sampler.

Defaults [CODE defaults of grpo_fast.py per the spec]: frac 0.5 (capped by B//2), cooldown 5 steps,
max_reuse 20, window [0.24, 0.70]. All are per-step / per-prompt quantities, so they are kept for the
embedded default (B = 32 -> 16 replay slots; ~150 steps / cooldown 5 leaves max_reuse = 20 reachable
but not binding). The 1.5B launch script's 0.5 / 2 / 10 / [0.25, 0.75] is the gentler alternative.
Cost: O(B log H) per step for a heap of H eligible prompts; per-prompt state is sparse (visited only).
"""
from __future__ import annotations

import heapq
import math

from ..core.registry import register
from ..core.types import Batch, Group, Prompt
from .base import Component, StepContext


@register("planner", "prompt-replay", provenance="CODE+INF",
          summary="Prompt Replay: up to B//2 slots re-ask prompts with pass rate nearest 0.5 (cooldown, max reuse)")
class PromptReplay(Component):
    def __init__(self, frac: float = 0.5, cooldown: int = 5, max_reuse: int = 20, p_min: float = 0.24,
                 p_max: float = 0.70, cooldown_jitter: float = 0.2, adaptive_cooldown: bool = False):
        if not 0 <= frac <= 1 or cooldown < 0 or max_reuse < 0 or not 0 <= p_min <= p_max <= 1:
            raise ValueError("prompt-replay: need 0 <= frac <= 1, cooldown >= 0, max_reuse >= 0, 0 <= p_min <= p_max <= 1")
        self.frac, self.cooldown, self.max_reuse = float(frac), int(cooldown), int(max_reuse)
        self.p_min, self.p_max = float(p_min), float(p_max)
        self.cooldown_jitter, self.adaptive_cooldown = float(cooldown_jitter), bool(adaptive_cooldown)
        # sparse per-prompt state (only prompts ever evaluated)
        self.pass_rate: dict[int, float] = {}
        self.reuse: dict[int, int] = {}
        self.last_step: dict[int, int] = {}
        self.cool: dict[int, int] = {}  # this prompt's (jittered) cooldown, drawn at its last evaluation
        self.heap: list[tuple[float, float, int, int]] = []
        self.active: set[int] = set()  # issued as replays, not yet evaluated
        self._issued = 0  # replays issued this step
        self.replays_total = 0

    # ---- the rule ------------------------------------------------------------------------
    def budget(self, batch_size: int) -> int:
        if batch_size <= 1:
            return 0
        return max(0, min(int(math.floor(batch_size * self.frac)), batch_size // 2))

    def in_window(self, rate: float) -> bool:
        return rate > 0.0 and self.p_min <= rate <= self.p_max

    def _entry(self, pid: int):
        rate = self.pass_rate.get(pid)
        if rate is None or not self.in_window(rate):
            return None
        return (abs(rate - 0.5), rate, self.reuse.get(pid, 0), pid)

    def _base_cooldown(self, rate: float) -> int:
        if not self.adaptive_cooldown:
            return self.cooldown
        bucket = min(3, int(round(abs(rate - 0.5) * 10)))
        return 5 * (bucket + 1)

    def _draw_cooldown(self, rate: float, ctx: StepContext) -> int:
        c = self._base_cooldown(rate)
        if self.cooldown_jitter <= 0 or c <= 0:
            return c
        j = max(1, int(round(self.cooldown_jitter * c)))
        return max(0, int(ctx.rng.integers(c - j, c + j + 1)))

    def _cooled(self, pid: int, step: int) -> bool:
        last = self.last_step.get(pid)
        return last is None or step - last >= self.cool.get(pid, self.cooldown)

    def _pop_valid(self, step: int, reserved: set[int]) -> int | None:
        aside = []
        found = None
        while self.heap:
            entry = heapq.heappop(self.heap)
            _, _, snap, pid = entry
            rate = self.pass_rate.get(pid)
            if rate is None or not self.in_window(rate) or pid in reserved:
                continue
            if pid in self.active:
                aside.append(entry)
                continue
            if self.reuse.get(pid, 0) != snap:
                fresh = self._entry(pid)
                if fresh is not None:
                    heapq.heappush(self.heap, fresh)
                continue
            if not self._cooled(pid, step):
                aside.append(entry)
                continue
            if self.reuse.get(pid, 0) >= self.max_reuse:
                continue  # reuse budget spent: dropped for good
            found = pid
            break
        for e in aside:
            heapq.heappush(self.heap, e)
        return found

    def begin_step(self, ctx: StepContext) -> None:
        self._issued = 0

    def select(self, candidates: list[Prompt], need: int, ctx: StepContext) -> list[Prompt]:
        slots = min(self.budget(ctx.batch_size) - self._issued, need)
        replays: list[Prompt] = []
        reserved = set(ctx.groups) | self.active
        while len(replays) < slots:
            pid = self._pop_valid(ctx.step, reserved)
            if pid is None:
                break
            replays.append(ctx.pool[pid])
            reserved.add(pid)
            self.reuse[pid] = self.reuse.get(pid, 0) + 1
            self.active.add(pid)
        self._issued += len(replays)
        self.replays_total += len(replays)
        ctx.metrics["replayed"] = ctx.metrics.get("replayed", 0.0) + len(replays)
        taken = {p.id for p in replays}
        return replays + [p for p in candidates if p.id not in taken]

    def observe(self, groups: list[Group], batch: Batch, ctx: StepContext) -> None:
        for g in groups:
            if g.n == 0:
                continue
            pid, rate = g.prompt.id, float(g.pass_rate)
            self.pass_rate[pid] = rate
            self.last_step[pid] = int(ctx.step)
            self.cool[pid] = self._draw_cooldown(rate, ctx)
            self.active.discard(pid)
            if self.in_window(rate) and self.reuse.get(pid, 0) < self.max_reuse:
                heapq.heappush(self.heap, self._entry(pid))
        # a replay issued but never rolled out (dropped by a later component) is no longer in flight
        self.active.clear()
        ctx.metrics["replay_heap"] = float(len(self.heap))

    # ---- persistence ---------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "pass_rate": {int(k): float(v) for k, v in self.pass_rate.items()},
            "reuse": {int(k): int(v) for k, v in self.reuse.items()},
            "last_step": {int(k): int(v) for k, v in self.last_step.items()},
            "cool": {int(k): int(v) for k, v in self.cool.items()},
            "heap": [[float(a), float(b), int(c), int(d)] for a, b, c, d in self.heap],
            "active": sorted(int(x) for x in self.active),
            "issued": self._issued, "replays_total": self.replays_total,
        }

    def load_state_dict(self, state: dict) -> None:
        self.pass_rate = {int(k): float(v) for k, v in state["pass_rate"].items()}
        self.reuse = {int(k): int(v) for k, v in state["reuse"].items()}
        self.last_step = {int(k): int(v) for k, v in state["last_step"].items()}
        self.cool = {int(k): int(v) for k, v in state["cool"].items()}
        self.heap = [(float(a), float(b), int(c), int(d)) for a, b, c, d in state["heap"]]
        heapq.heapify(self.heap)  # already a heap; cheap insurance after a round trip
        self.active = {int(x) for x in state["active"]}
        self._issued = int(state["issued"])
        self.replays_total = int(state["replays_total"])
