"""DAS: "Beat the long tail: Distribution-Aware Speculative Decoding for RL Training" (Shao, Srivatsa,
Srivastava, Wu, Ariyak, Wu, Patel, Wang, Liang, Dao, Zhang, Zhang, Athiwaratkun, Xu, Wang; Together AI /
UCSD; arXiv 2511.13841, MLSys 2026). Read from the abstract [ABS] and the authors' blog posts (Together AI,
wuklab) [SEC]; no official code was in the stored sources, so nothing here is [CODE].

RL revisits the same prompts epoch after epoch and a prompt's rollouts repeat each other; DAS drafts a
row's next tokens from the prompt's recent rollouts (no draft model to retrain as the policy drifts) and
lets the policy verify them, so the rollouts are exactly what plain decoding would sample.

Rule::

    drafter: per prompt, a suffix tree of its recent rollouts (the last        [ABS: "nonparametric drafter
        `window` ones generated, trained or not), updated after every step        built from recent rollouts
        (rebuilt for the prompts visited: INF)                                    using an incrementally
                                                                                   maintained suffix tree"]
    draft for a running row: the longest suffix of (start, its tokens so far),  [INF: the SuffixDecoding
        at most `match_len` tokens, found in the tree; then the most frequent      scheme the DAS drafter
        continuation, token by token, while its share of the node's count is      builds on; the match and
        >= `min_prob`, at most k tokens                                           threshold are rollwise's]
    verification: exact sampling (the rows keep the policy's distribution)     [ABS: "without altering
        (generate/torch_engine.py: the policy is sampled at each draft position    model outputs"; the rule
        in order, draft tokens kept while the sample equals them; the first        is standard speculative
        sample that differs is the next token)                                     sampling, INF]
    length-aware budget: k = `k_long` for a row already longer than `tail`      [ABS: "more aggressive draft
        (quantile, default the median) of its prompt's recent rollout lengths,     budgets to long
        else `k_short`; a prompt with no history gets no drafts                    trajectories"; the
                                                                                   threshold INF]

Cost (the ledger): every token a row keeps from a draft is of kind "draft", not "decoded"; every draft
token the verification scored, kept or not, is counted once in `verified_tokens` and the budget weighs
it by `draft_cost` (as SPEC-RL's). The default is SPEC-RL's measured prefill/decode ratio of the torch
engine (0.566, 10-token drafts prefilled in a batch) [INF]: DAS's drafts are scored inside decode
forwards, whose extra tokens are cheaper still on a memory-bound GPU; re-measure on your engine and pass
`draft_cost`. Decode-equivalents per row: plain L; DAS (one sampled token per pass) + draft_cost x
(draft tokens scored), so DAS saves when more than draft_cost of the scored draft tokens are kept.

Composes with selectors, allocators, filters, stages and replay (`vip+das`, `ar3po+das`, `das+popo`).
Refused by name (control/capabilities.py CONFLICTS): another Speculator (`spec-rl`, `treepo`: a row would
be run two ways), a Watcher (`duet-abort`, `arrol`: the watcher never sees the drafted rows) and partial
rollouts (`april`). Needs an engine with drafts: the torch engine, or the vLLM engine built with
`engine_options.drafts={method: history, num_speculative_tokens: k}` (which cuts drafts to k, so take
k >= k_long to draft as on the torch engine); others are refused at the first step, naming the engine.
"""
from __future__ import annotations

import math
from collections import OrderedDict

import numpy as np

from ..control.base import Component, StepContext, Wave
from ..control.capabilities import Speculator
from ..core.registry import register
from ..core.types import Group, Request
from .spec_rl import MEASURED_DRAFT_COST

START = -1  # the sentinel before a response's first token: a draft can match "the start"


class SuffixTree:
    """The suffixes of some token sequences, each cut at `depth` tokens, as a trie with counts (a suffix
    tree without path compression: `depth` bounds it at O(tokens x depth) nodes)."""

    def __init__(self, depth: int):
        self.depth = depth
        self.root: dict = {"n": 0, "next": {}}

    def add(self, tokens: list[int]) -> None:
        seq = [START] + list(tokens)
        for i in range(len(seq)):
            node = self.root
            node["n"] += 1
            for t in seq[i: i + self.depth]:
                node = node["next"].setdefault(t, {"n": 0, "next": {}})
                node["n"] += 1

    def draft(self, context: list[int], k: int, match_len: int, min_prob: float) -> list[int]:
        """The continuation of the longest suffix of (START, context) of at most `match_len` tokens that
        the tree holds: the most frequent next token (the smallest id among equals) while its share of
        its parent's count is >= min_prob, at most k tokens and `depth` tokens deep."""
        if k <= 0:
            return []
        seq = [START] + list(context)
        for m in range(min(match_len, len(seq)), 0, -1):
            node = self._find(seq[-m:])
            if node is not None:
                break
        else:
            return []
        out = []
        while len(out) < k and len(out) + m < self.depth and node["next"]:
            t, child = max(node["next"].items(), key=lambda kv: (kv[1]["n"], -kv[0]))
            if child["n"] < min_prob * node["n"]:
                break
            out.append(t)
            node = child
        return out

    def _find(self, path: list[int]):
        node = self.root
        for t in path:
            node = node["next"].get(t)
            if node is None:
                return None
        return node


@register("planner", "das", provenance="ABS+SEC+INF",
          summary="DAS: draft from a per-prompt suffix tree of recent rollouts, verified exactly by the policy")
class DAS(Component):
    """Distribution-aware speculative decoding. `window`: rollouts kept per prompt; `match_len`: longest
    suffix matched; `k_short` / `k_long`: draft tokens per pass below / beyond the length threshold;
    `tail`: that threshold as a quantile of the prompt's recent lengths; `min_prob`: the smallest share of
    a drafted token among its node's continuations; `draft_cost`: a scored draft token in decoded tokens;
    `max_prompts`: prompts whose history is kept (least recently visited dropped first)."""

    needs_sampling = True  # it runs the rounds' requests itself (through the engine's drafts)
    needs_policy = True  # the policy's forward verifies the drafts (inside the engine's decode passes)

    def __init__(self, window: int = 16, match_len: int = 8, k_short: int = 2, k_long: int = 8, tail: float = 0.5,
                 min_prob: float = 0.5, draft_cost: float = MEASURED_DRAFT_COST, max_prompts: int = 100_000):
        if window < 1 or match_len < 1 or not 0 <= k_short <= k_long or k_long < 1 or not 0 <= tail <= 1 \
                or not 0 <= min_prob <= 1 or not 0 <= draft_cost < math.inf or max_prompts < 1:
            raise ValueError("das: need window >= 1, match_len >= 1, 0 <= k_short <= k_long (k_long >= 1), "
                             "0 <= tail <= 1, 0 <= min_prob <= 1, 0 <= draft_cost < inf, max_prompts >= 1")
        self.window, self.match_len, self.k_short, self.k_long = int(window), int(match_len), int(k_short), int(k_long)
        self.tail, self.min_prob, self.draft_cost, self.max_prompts = float(tail), float(min_prob), float(draft_cost), \
            int(max_prompts)
        self.declares = (Speculator(self.draft_cost),)
        self.history: OrderedDict[int, list[list[int]]] = OrderedDict()  # prompt id -> its recent rollouts' tokens
        self._trees: dict[int, tuple[SuffixTree, float]] = {}  # prompt id -> (its tree, its length threshold)

    # ---- the drafter the engine calls for each running row ------------------------------------
    def budget(self, prompt_id: int, length: int) -> int:
        """Draft tokens for a row of this prompt that has `length` tokens: more for the long tail."""
        entry = self._tree(prompt_id)
        if entry is None:
            return 0
        return self.k_long if length >= entry[1] else self.k_short

    def draft(self, request: Request, sample: int, tokens: list[int]) -> list[int]:
        if request.purpose != "train" or request.prefix is not None:
            return []
        entry = self._tree(request.prompt.id)
        if entry is None:
            return []
        return entry[0].draft(tokens, self.budget(request.prompt.id, len(tokens)), self.match_len, self.min_prob)

    def _tree(self, prompt_id: int):
        if prompt_id not in self._trees:
            rows = self.history.get(prompt_id)
            if not rows:
                return None
            tree = SuffixTree(self.match_len + self.k_long)
            for r in rows:
                tree.add(r)
            self._trees[prompt_id] = (tree, float(np.quantile([len(r) for r in rows], self.tail)))
        return self._trees[prompt_id]

    # ---- the hooks ------------------------------------------------------------------------------
    def speculate(self, requests: list[Request], ctx: StepContext):
        before = ctx.ledger.verified_tokens if ctx.ledger is not None else 0
        groups = yield Wave(requests, options={"drafter": self.draft})  # the engine's Drafts capability
        kept = sum(r.tokens_by_kind().get("draft", 0) for g in groups for r in g.rollouts)
        scored = (ctx.ledger.verified_tokens - before) if ctx.ledger is not None else 0
        m = ctx.metrics
        m["das/kept"] = m.get("das/kept", 0.0) + kept
        m["das/scored"] = m.get("das/scored", 0.0) + scored
        m["das/accept_rate"] = m["das/kept"] / max(m["das/scored"], 1.0)
        return groups

    def observe(self, groups: list[Group], batch, ctx: StepContext) -> None:
        for g in groups:  # every train group generated this step, trained or not
            rows = [r.token_ids_T.tolist() for r in g.rollouts
                    if getattr(r, "status", "done") == "done" and r.purpose == "train" and hasattr(r, "token_ids_T")]
            if rows:
                self._remember(g.prompt.id, rows)

    def _remember(self, prompt_id: int, rows: list[list[int]]) -> None:
        kept = (self.history.pop(prompt_id, []) + rows)[-self.window:]
        self.history[prompt_id] = kept
        self._trees.pop(prompt_id, None)  # rebuilt at its next draft
        while len(self.history) > self.max_prompts:
            old, _ = self.history.popitem(last=False)
            self._trees.pop(old, None)

    def state_dict(self) -> dict:
        return {"history": [[pid, [list(r) for r in rows]] for pid, rows in self.history.items()]}

    def load_state_dict(self, state: dict) -> None:
        self.history, self._trees = OrderedDict(), {}
        for pid, rows in state["history"]:
            self.history[int(pid)] = [[int(t) for t in r] for r in rows]
