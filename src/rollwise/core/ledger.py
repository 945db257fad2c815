"""Ledger: the one place where cost is counted. Every comparison reads it, never a method's claim.

Each generated token is counted under three labels (see core/types.py): purpose (train, pilot,
profile, oracle, eval), fate (open -> trained / discarded / scored, or aborted, pruned, carried) and
kind (decoded, draft, shared). Only the step driver writes here: it charges every engine result when
it comes back (fate "open") and settles fates when the step's batch is known. Engines and planners
never touch the ledger. How a fate moves through a rollout's lineage (a resumed row's carried prefix, a
TreePO tree's shared nodes, an accepted SPEC-RL draft) is written here too (`move_group`): the data
types in core/types.py only hold what the ledger reads.

The budget of a run is `budget_tokens()`: decoded tokens of every purpose except eval and oracle (the
oracle planner's measurements are off the books by design; eval is reported apart), plus
draft-verified tokens weighted by the engine's measured prefill/decode cost ratio (`draft_cost`).
Draft-verified tokens are every draft token SPEC-RL's verification prefill scored, accepted or
rejected (`verified_tokens`): the rejected tail costs the same prefill. The accepted ones are also
counted, by purpose and fate, as kind "draft" in `tokens`. Tokens of kind "shared" (a TreePO tree
node that several leaves continue) were decoded once and are counted once, so the budget counts them
as decoded. Nothing reused is free: a rollout is charged when generated, whatever happens to it later.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

from .types import FATES, KINDS, PURPOSES, Group, Rollout

OFF_BUDGET = ("eval", "oracle")
DECODED_KINDS = ("decoded", "shared")  # a shared tree prefix was decoded (once): it costs as decoded
# The per-purpose view that metrics.jsonl has always had: "discarded" there means train rollouts
# that were filtered or trimmed (fate discarded), and "train" the other train rollouts.
LEGACY_PURPOSES = ("train", "pilot", "discarded", "eval", "profile", "oracle")


@dataclass
class Ledger:
    tokens: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (purpose, fate, kind)
    rollouts: dict[tuple[str, str], int] = field(default_factory=dict)  # (purpose, fate)
    prompt_tokens: int = 0  # prefilled prompt tokens (all purposes)
    learner_tokens: int = 0  # tokens the learner ran forward+backward on (prompt + response, x epochs)
    old_logprob_tokens: int = 0  # tokens of the learner's no-grad pi_old pass (learner.recompute_old)
    ref_logprob_tokens: int = 0  # tokens of the reference policy's pass (learner.kl_coef > 0)
    scoring_tokens: int = 0  # prompt tokens of prefill-only scoring passes (HIVE, DOTS)
    reused_tokens: int = 0  # tokens trained in a later step than the one that generated them
    verified_tokens: int = 0  # draft tokens scored by a verification prefill (SPEC-RL), accepted or not
    draft_cost: float = 1.0  # cost of a draft-verified token in decoded-token units (engine-measured)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time by phase

    # ---- writing (the driver only) ---------------------------------------------------------
    def charge(self, groups, prompt_tokens: int = 0) -> None:
        """Count newly generated groups: their rollouts go from fate "new" to "open" (so a rollout is
        never charged twice, and a hand-made or restored one is never settled as if charged)."""
        acc: dict = {}
        move_groups(groups, "new", "open", acc)
        for (purpose, kind, _, _), (n, tok) in acc.items():
            self._add(purpose, "open", kind, n, tok)
        self.prompt_tokens += int(prompt_tokens)

    def charge_learner(self, stats: dict) -> None:
        """The learner's compute for one update, taken out of its stats (the metrics row reports the
        ledger's running totals instead)."""
        self.learner_tokens += int(stats.pop("learner_tokens", 0))
        self.old_logprob_tokens += int(stats.pop("old_logprob_tokens", 0))
        self.ref_logprob_tokens += int(stats.pop("ref_logprob_tokens", 0))

    def charge_verified(self, prompt_tokens: int, draft_tokens: int) -> None:
        """A verification prefill (SPEC-RL): its prompt tokens, and every draft token it scored, accepted
        or not (the budget weights those by `draft_cost`)."""
        self.prompt_tokens += int(prompt_tokens)
        self.verified_tokens += int(draft_tokens)

    def set_seconds(self, phase: str, seconds: float) -> None:
        """A phase's wall time measured by a clock of its own (the async loop's training time, which leaves
        out evaluations and checkpoints), replacing what the ledger's timer summed for it."""
        self.seconds[phase] = float(seconds)

    def charge_scoring(self, prompt_tokens: int) -> None:
        """A prefill-only scoring pass over prompts (HIVE, DOTS)."""
        self.scoring_tokens += int(prompt_tokens)

    def count_reused(self, groups, trained_now: int) -> None:
        """Tokens of a trained batch that were generated in an earlier step (`trained_now`: those of this
        step's, which settling them just returned). A TreePO tree's shared nodes are held by several leaves
        but generated once: counted once, not as reused."""
        self.reused_tokens += _held_once(groups) - trained_now

    def work(self) -> dict[str, float]:
        """Every kind of work so far, as bench/costs.py `compute_units` prices it: decode (every generated
        token but eval and the oracle's, whatever its fate), prefill (prompts, prefixes, re-prefills and
        draft tokens a verification scored), the learner's forward+backward, its old/reference log-prob
        forwards, prompt scoring (HIVE, DOTS). ARRoL's head is not counted (~1e-6 of a decode token each)."""
        decoded = sum(v for (p, _, k), v in self.tokens.items() if p not in OFF_BUDGET and k in DECODED_KINDS)
        return {"decode_tokens": decoded, "prefill_tokens": self.prompt_tokens + self.verified_tokens,
                "learner_tokens": self.learner_tokens,
                "logprob_tokens": self.old_logprob_tokens + self.ref_logprob_tokens,
                "scoring_tokens": self.scoring_tokens, "aux_tokens": 0}

    def compute_counts(self) -> dict[str, int]:
        """The non-decode work a compute budget charges (prefill and the learner's passes), as running
        totals for a metrics row."""
        return {"prompt_tokens": self.prompt_tokens, "learner_tokens": self.learner_tokens,
                "old_logprob_tokens": self.old_logprob_tokens, "ref_logprob_tokens": self.ref_logprob_tokens,
                "scoring_tokens": self.scoring_tokens}

    def settle(self, groups, frm: str, to) -> int:
        """Move the groups' rollouts of fate `frm` to fate `to` (a fate, or {purpose: fate} for some
        purposes only); returns the tokens moved. A rollout already settled is never moved twice."""
        for fate in ([to] if isinstance(to, str) else to.values()):
            if fate not in FATES:
                raise ValueError(f"unknown fate {fate!r}; expected one of {FATES}")
        acc: dict = {}
        move_groups(groups, frm, to, acc)
        for (purpose, kind, src, fate), (n, tok) in acc.items():  # src: frm, or "carried" for a prefix
            self._add(purpose, src, kind, -n, -tok)
            self._add(purpose, fate, kind, n, tok)
        return sum(tok for _, tok in acc.values())

    def _add(self, purpose: str, fate: str, kind: str, n: int, tok: int) -> None:
        if purpose not in PURPOSES:
            raise ValueError(f"unknown rollout purpose {purpose!r}; expected one of {PURPOSES}")
        if kind not in KINDS:
            raise ValueError(f"unknown token kind {kind!r}; expected one of {KINDS}")
        key = (purpose, fate, kind)
        self.tokens[key] = self.tokens.get(key, 0) + tok
        self.rollouts[(purpose, fate)] = self.rollouts.get((purpose, fate), 0) + n

    @contextmanager
    def timer(self, phase: str):
        """Wall seconds of a phase, and this process's CPU seconds in it (every thread; `<phase>_cpu`): on a
        shared machine wall time grows with the load, CPU time with the work."""
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0
            self.seconds[f"{phase}_cpu"] = self.seconds.get(f"{phase}_cpu", 0.0) + time.process_time() - c0

    # ---- reading ---------------------------------------------------------------------------
    def count(self, purpose=None, fate=None, kind=None) -> int:
        """Tokens matching every label given (None = any)."""
        return sum(v for (p, f, k), v in self.tokens.items()
                   if (purpose is None or p == purpose) and (fate is None or f == fate) and (kind is None or k == kind))

    def count_rollouts(self, purpose=None, fate=None) -> int:
        return sum(v for (p, f), v in self.rollouts.items()
                   if (purpose is None or p == purpose) and (fate is None or f == fate))

    def budget_tokens(self) -> int:
        decoded = sum(v for (p, _, k), v in self.tokens.items() if p not in OFF_BUDGET and k in DECODED_KINDS)
        return decoded + int(round(self.draft_cost * self.verified_tokens))

    def budget_rollouts(self) -> int:
        return sum(v for (p, _), v in self.rollouts.items() if p not in OFF_BUDGET)

    def legacy_tokens(self) -> dict[str, int]:
        """Tokens by LEGACY_PURPOSES (the metrics' tokens_<purpose> fields)."""
        return self._legacy(self.count)

    def legacy_rollouts(self) -> dict[str, int]:
        return self._legacy(self.count_rollouts)

    @staticmethod
    def _legacy(count) -> dict[str, int]:
        out = {p: count(p, None) for p in LEGACY_PURPOSES if p != "discarded"}
        out["discarded"] = count("train", "discarded")
        out["train"] -= out["discarded"]
        return {p: out[p] for p in LEGACY_PURPOSES}

    def breakdown(self) -> dict[str, int]:
        """Every non-zero (purpose, fate, kind) count, as flat metric names tok/<purpose>/<fate>/<kind>,
        and the draft tokens verified (tok/verified) when there are any."""
        out = {f"tok/{p}/{f}/{k}": v for (p, f, k), v in sorted(self.tokens.items()) if v}
        if self.verified_tokens:
            out["tok/verified"] = self.verified_tokens
        return out

    # ---- persistence -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"tokens": [[*k, v] for k, v in self.tokens.items()],
                "rollouts": [[*k, v] for k, v in self.rollouts.items()],
                "prompt_tokens": self.prompt_tokens, "learner_tokens": self.learner_tokens,
                "old_logprob_tokens": self.old_logprob_tokens, "ref_logprob_tokens": self.ref_logprob_tokens,
                "scoring_tokens": self.scoring_tokens,
                "reused_tokens": self.reused_tokens, "draft_cost": self.draft_cost,
                "verified_tokens": self.verified_tokens,
                "seconds": dict(self.seconds)}

    def load_state_dict(self, s: dict) -> None:
        if isinstance(s["tokens"], dict):  # a checkpoint from before fates: {purpose: count}
            s = dict(s, tokens=_from_purposes(s["tokens"], True), rollouts=_from_purposes(s["rollouts"], False))
        self.tokens = {(str(p), str(f), str(k)): int(v) for p, f, k, v in s["tokens"]}
        self.rollouts = {(str(p), str(f)): int(v) for p, f, v in s["rollouts"]}
        self.prompt_tokens = int(s["prompt_tokens"])
        self.learner_tokens = int(s["learner_tokens"])
        self.old_logprob_tokens = int(s.get("old_logprob_tokens", 0))  # checkpoints from before 0.4: not counted
        self.ref_logprob_tokens = int(s.get("ref_logprob_tokens", 0))
        self.scoring_tokens = int(s.get("scoring_tokens", 0))
        self.reused_tokens = int(s.get("reused_tokens", 0))
        self.draft_cost = float(s.get("draft_cost", 1.0))
        self.verified_tokens = int(s.get("verified_tokens", 0))
        self.seconds = {k: float(v) for k, v in s["seconds"].items()}


# ---- moving fates: through a rollout's lineage, or a count-level group's segments -------------------
def move_group(g: Group, frm: str, to, acc: dict) -> None:
    """Set a new fate on the group's rollouts of fate `frm`: `to` is a fate, or {purpose: fate} (purposes
    not in it stay). What moved is added to acc[(purpose, kind, from, to)] = [rollouts, tokens]: a rollout
    counts once, under the kind of its first token-kind entry. A resumed rollout carries its own new
    tokens only and counts as no new rollout: its prefix (`lineage.prefix`, charged when generated and
    "carried" since) follows it to the same fate. A prefix that was never charged (a draft accepted by
    SPEC-RL's verification, fate "new") is charged with its continuation, as the rollout, and shares its
    fate from then on. A count-level group (the simulator's) moves by its Segments, all decoded."""
    move_groups((g,), frm, to, acc)


def move_groups(groups, frm: str, to, acc: dict) -> None:
    """move_group over many groups in one call (the ledger's charge and settle). The simulator moves ~10^3
    count-level groups a step, twice each: their Segments are moved inline, without a call per group, and
    tallied by purpose alone (within one call a segment's fate is a function of its purpose, and segments
    are all decoded), so no key is built per segment."""
    one = to if type(to) is str else None  # the usual case: one fate for every purpose
    tally: dict[str, list[int]] = {}  # purpose -> [rollouts, tokens] of the segments moved
    for g in groups:
        segs = g.segments()
        if segs is None:
            for r in g.rollouts:
                if r.fate != frm:
                    continue
                fate = one or to.get(r.purpose)
                if fate is not None:
                    _move_rollout(r, frm, fate, acc)
            continue
        for s in segs:
            if s.fate != frm:
                continue
            purpose = s.purpose
            fate = one or to.get(purpose)
            if fate is None:
                continue
            s.fate = fate
            c = tally.get(purpose)
            if c is None:
                tally[purpose] = [s.n, s.tokens]
            else:
                c[0] += s.n
                c[1] += s.tokens
    for purpose, (n, tok) in tally.items():
        _add_to(acc, (purpose, "decoded", frm, one or to[purpose]), n, tok)


def _move_rollout(r, frm: str, fate: str, acc: dict) -> None:
    """One rollout to a new fate (and its carried prefix chain with it), counted into acc."""
    r.fate = fate
    pre = r.lineage.prefix if type(r) is Rollout else None
    if pre is not None and frm == "new" and pre.lineage.tree_path is not None:  # a branch of a tree (TreePO)
        _branch(r, pre, acc)
    first = r.lineage.new_rollout if pre is not None else 1
    for kind, tok in r.tokens_by_kind().items():
        key = (r.purpose, kind, frm, fate)
        c = acc.get(key)
        if c is None:
            acc[key] = [first, tok]
        else:
            c[0] += first
            c[1] += tok
        first = 0
    if pre is None:
        return
    if pre.fate == frm:  # a draft prefix (SPEC-RL), never charged on its own: charged with it, same fate
        _move_rollout(pre, frm, fate, acc)
    elif frm != "new" and pre.fate == "carried" and fate != "carried":  # settling, not charging
        _move_rollout(pre, "carried", fate, acc)


def _branch(r: Rollout, parent: Rollout, acc: dict) -> None:
    """A tree branch is being charged (TreePO). Every branch after a node's first is a rollout of its
    own (a tree of n leaves counts n rollouts), and the ancestors its planner marked as shared
    (`lineage.share`: several leaves use them) move their tokens, already charged as decoded, to kind
    "shared" the first time one of their branches is charged: decoded once, counted once."""
    r.lineage.new_rollout = int(parent.lineage.branched)
    parent.lineage.branched = True
    node = parent
    while node is not None:
        own = node.tokens_by_kind()
        if node.lineage.share and node.fate == "open" and "shared" not in own:
            for kind, tok in own.items():
                _add_to(acc, (node.purpose, kind, "new", "open"), 0, -tok)
            _add_to(acc, (node.purpose, "shared", "new", "open"), 0, sum(own.values()))
            node.lineage.tokens_by_kind = {"shared": sum(own.values())}
        node = node.lineage.prefix


def _add_to(acc: dict, key: tuple, n: int, tok: int) -> None:
    c = acc.setdefault(key, [0, 0])
    c[0] += n
    c[1] += tok


def _held_once(groups) -> int:
    """The tokens these groups' rollouts hold, a prefix that two of them continue counted once (the
    shared nodes of a TreePO tree are trained in every leaf but were generated once)."""
    seen: set[int] = set()
    held = 0
    for g in groups:  # one pass: the simulator's count-level groups continue no prefix
        held += g.tokens
        for pre in g.prefixes():
            while pre is not None:
                if id(pre) in seen:
                    held -= pre.num_tokens  # this prefix and all its ancestors are held already
                    break
                seen.add(id(pre))
                pre = pre.lineage.prefix
    return held


def _from_purposes(counts: dict, with_kind: bool) -> list:
    out = []
    for p, v in counts.items():
        purpose, fate = ("train", "discarded") if p == "discarded" else (p, "trained" if p == "train" else "scored")
        out.append([purpose, fate, "decoded", v] if with_kind else [purpose, fate, v])
    return out
