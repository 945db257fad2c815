"""Ledger: the one place where cost is counted. Every comparison reads it, never a method's claim.

Each generated token is counted under three labels (see core/types.py): purpose (train, pilot,
profile, oracle, eval), fate (open -> trained / discarded / scored, or aborted, pruned, carried) and
kind (decoded, draft, shared). Only the step driver writes here: it charges every engine result when
it comes back (fate "open") and settles fates when the step's batch is known. Engines and planners
never touch the ledger.

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

from .types import FATES, KINDS, PURPOSES

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
        for g in groups:
            g.move("new", "open", acc)
        for (purpose, kind, _, _), (n, tok) in acc.items():
            self._add(purpose, "open", kind, n, tok)
        self.prompt_tokens += int(prompt_tokens)

    def charge_learner(self, stats: dict) -> None:
        """The learner's compute for one update, taken out of its stats (the metrics row reports the
        ledger's running totals instead)."""
        self.learner_tokens += int(stats.pop("learner_tokens", 0))
        self.old_logprob_tokens += int(stats.pop("old_logprob_tokens", 0))
        self.ref_logprob_tokens += int(stats.pop("ref_logprob_tokens", 0))

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
        for g in groups:
            g.move(frm, to, acc)
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
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0

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


def _from_purposes(counts: dict, with_kind: bool) -> list:
    out = []
    for p, v in counts.items():
        purpose, fate = ("train", "discarded") if p == "discarded" else (p, "trained" if p == "train" else "scored")
        out.append([purpose, fate, "decoded", v] if with_kind else [purpose, fate, v])
    return out
