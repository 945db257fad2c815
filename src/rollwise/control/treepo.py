"""TreePO: segment-wise tree sampling.

TreePO ("TreePO: Bridging the Gap of Policy Optimization and Efficacy and Inference Efficiency with
Heuristic Tree-based Modeling", arXiv 2508.17445, code multimodal-art-projection/TreePO, a verl 0.3
fork). A prompt's n samples share prefixes: TreePO grows them as a tree of fixed-length segments, so
a shared segment is decoded once, and every leaf trains as a full sequence.

Rule [CODE: recipe/treepo/vllm_rollout_tree.py, generate_sequences_tree_deepth_first_vanilla_mode]::

    per prompt: a leaf budget W = n (the group size the planner asked for)
    first step: `first_div` samples of one segment each (uniform in [branch, first_div_max] when
    first_div_max > branch, else branch), at most W
    every step: one segment of `segment_tokens` tokens for every live path, in one engine call
    a path ends (a leaf) at EOS or at the response's token budget (length); with `max_depth`, the
    segment at that depth runs to the end of the response
    the others go deeper: total = min(W - finished, branch * (#deeper + #finished this step)) children,
    split equally over the deeper paths ("fixed_avg": every path >= 1, the remainder to the first)
    fallback: a prompt with leaves still to fill and no live path clones a finished leaf, cuts it at
    a random segment boundary and branches `branch` children there, until W paths are out; so every
    prompt ends with exactly W leaves

rollwise's choices [INF]:
  * a branch is a Request of one row that continues its parent node's tokens (Request.prefix, as a
    resumed partial rollout): its rollout holds prompt + every ancestor's segments + its own, with each
    token's behaviour log-prob and policy version, so a leaf trains as a full sequence. The torch
    engine keeps the KV of a row its segment stopped, and every branch of that node starts from it,
    prefilling one token (generate/torch_engine.py, PrefixKV; `engine_options.prefix_kv_rows=0`
    re-prefills prompt + prefix per branch instead, charged as prompt tokens, not decode). On the vLLM
    engine (tested on its CPU build: tests/test_vllm_engine.py) prefix caching can serve the parent's
    whole KV blocks.
  * the paper's budget subtracts the paths still queued; waves here are synchronous (every path of a
    wave is back before the next), so none is.
  * not implemented: the repetition detector and the "boxed answer" stop (a branch stops at EOS, at the
    token budget or at `max_depth`), and the log-prob-weighted split (only "fixed_avg").
  * cutting a leaf at segment boundary b is branching from its ancestor node at depth b (b = 0: fresh
    samples of the prompt); the leaf to clone is taken in turn, the boundary drawn from a generator
    seeded by (seed, step), as is the random first width: reproducible, and a resumed run draws the same.

Tree structure for the learner: every leaf carries `lineage.tree_path` = (root sample, branch, ...),
the root index unique among the prompt's samples of the whole run (so a leaf reused in a later step
shares no subtree with new ones); the `treepo` advantage (learn/advantages.py) reads it.

Cost: every node's segment is decoded once and charged once when it comes back. A node that several
leaves continue (it has two branches or more, or a descendant has) is marked `lineage.share`; the
ledger moves its tokens to kind "shared" when its first branch is charged. The budget counts "shared"
as decoded (they were decoded, once). Each leaf counts as one rollout.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..core.registry import register
from ..core.types import Group, Request, Rollout
from .base import Component, StepContext
from .capabilities import Branching, Resumable, Speculator


class Tree:
    """One request's tree: its nodes by path, its leaves, the paths that go deeper after this step."""

    def __init__(self, request: Request, roots: dict[int, int]):
        self.request, self.roots = request, roots  # roots: root samples per prompt so far (the planner's)
        self.width = request.n  # W: leaves wanted
        self.nodes: dict[tuple, Rollout] = {}
        self.leaves: list[Rollout] = []
        self.deeper: list[Rollout] = []  # nodes of the last step that go deeper
        self.finished_now = 0  # leaves of the last step
        self.branches: dict[tuple, int] = {}  # children made so far, per node path

    def add(self, parent: tuple, index: int, row: Rollout) -> None:
        path = parent + (index,)
        row.lineage.tree_path = path
        self.nodes[path] = row
        if row.status == "partial":
            self.deeper.append(row)
        elif row.status == "done":
            self.leaves.append(row)
            self.finished_now += 1
        # an aborted or pruned row (not in synchronous runs) is neither: its leaf is re-spent by the fallback

    def spawn(self, parent: tuple, k: int) -> list[int]:
        """k new child indices of `parent`. A node with two branches or more, and every ancestor of it,
        is marked shared: several leaves will continue it."""
        counts, key = (self.branches, parent) if parent else (self.roots, self.request.prompt.id)
        first = counts.get(key, 0)  # root indices stay unique across the prompt's trees
        counts[key] = first + k
        if parent and first + k >= 2:
            for d in range(len(parent), 0, -1):
                self.nodes[parent[:d]].lineage.share = True
        return list(range(first, first + k))


@register("planner", "treepo", provenance="CODE+INF",
          summary="TreePO: segment-wise tree sampling; branches share their prefix, every leaf trains")
class TreePO(Component):
    """Segment-wise tree sampling. `segment_tokens`: tokens per segment; `branch`: children per deeper
    path (fixed_step_width); `first_div_max`: a random first width in [branch, first_div_max] (None: the
    first width is `branch`); `max_depth`: the segment at this depth runs to the end (None: the token
    budget alone ends paths); `seed`: of the first widths and the fallback's cut points. Composes with
    selectors, allocators and filters (`greso+treepo`, `treepo+dapo`); not with partial rollouts (april),
    in-flight control (duet-abort) or another component that runs rounds its own way (spec-rl)."""

    needs_sampling = True  # it runs the rounds' requests itself, segment by segment
    declares = (Speculator(), Resumable(), Branching())  # runs its rounds as trees whose branches continue

    def __init__(self, segment_tokens: int = 4, branch: int = 2, first_div_max: int | None = None,
                 max_depth: int | None = None, seed: int = 0):
        if segment_tokens < 1 or branch < 1 or (max_depth is not None and max_depth < 1):
            raise ValueError("treepo: need segment_tokens >= 1, branch >= 1 and max_depth >= 1 (or None)")
        if first_div_max is not None and first_div_max < branch:
            raise ValueError(f"treepo: first_div_max ({first_div_max}) must be >= branch ({branch}) or None")
        self.segment_tokens, self.branch, self.first_div_max = int(segment_tokens), int(branch), first_div_max
        self.max_depth, self.seed = max_depth, int(seed)
        self._rng = np.random.default_rng([self.seed, 0])
        # root samples drawn per prompt so far: tree paths stay unique across steps, so that a leaf reused
        # in a later group (AR3PO's reuse, prompt replay) never shares a subtree with a new one
        self._roots: dict[int, int] = {}

    def begin_step(self, ctx: StepContext) -> None:
        self._rng = np.random.default_rng([self.seed, ctx.step])

    def speculate(self, requests: list[Request], ctx: StepContext):
        """Grow one tree per request, a segment per wave; return each request's leaves as its Group."""
        trees = {i: Tree(r, self._roots) for i, r in enumerate(requests) if r.n > 0}
        wave = [(t, (), t.spawn((), min(t.width, self._first_width()))) for t in trees.values()]
        nodes = depth = 0
        while wave:
            reqs, owners = [], []  # owners[k]: (tree, parent path, the child indices request k makes)
            for t, parent, idx in wave:
                if not parent:  # fresh samples of the prompt: one request
                    reqs.append(self._request(t, parent, len(idx)))
                    owners.append((t, parent, idx))
                    continue
                for i in idx:  # branches: one row each, continuing the parent's tokens
                    reqs.append(self._request(t, parent, 1))
                    owners.append((t, parent, [i]))
            groups = yield reqs
            for (t, parent, idx), g in zip(owners, groups):
                for i, row in zip(idx, g.rollouts):
                    t.add(parent, i, row)
                nodes += g.n
            depth += 1
            wave = [w for t in trees.values() for w in self._grow(t)]
        m = ctx.metrics  # summed over the step's rounds (AR3PO's stages grow more trees)
        m["treepo/trees"] = m.get("treepo/trees", 0.0) + len(trees)
        m["treepo/nodes"] = m.get("treepo/nodes", 0.0) + nodes
        m["treepo/waves"] = m.get("treepo/waves", 0.0) + depth
        m["treepo/nodes_per_tree"] = m["treepo/nodes"] / max(m["treepo/trees"], 1.0)  # segments decoded per prompt
        return [Group(r.prompt, list(trees[i].leaves) if i in trees else []) for i, r in enumerate(requests)]

    def _grow(self, t: Tree) -> list[tuple]:
        """The next wave's (tree, parent path, child indices): branch the paths that go deeper, or, when
        none is left and leaves are missing, cut finished leaves and branch there (the fallback)."""
        deeper, finished_now = t.deeper, t.finished_now
        t.deeper, t.finished_now = [], 0
        remaining = t.width - len(t.leaves)  # every path out ends in at least one leaf
        if remaining <= 0:
            return []
        if deeper:  # "fixed_avg": an equal split, every path >= 1 (len(deeper) <= remaining always)
            total = min(remaining, self.branch * (len(deeper) + finished_now))
            base, extra = divmod(max(total, len(deeper)), len(deeper))
            return [(t, row.lineage.tree_path, t.spawn(row.lineage.tree_path, base + (j < extra)))
                    for j, row in enumerate(deeper)]
        cuts: dict[tuple, int] = {} if t.leaves else {(): remaining}  # no leaf at all: start over
        j = 0
        while t.leaves and remaining > 0:  # the fallback: leaves in turn, cut at a random segment boundary
            path = t.leaves[j % len(t.leaves)].lineage.tree_path
            j += 1
            parent = path[:int(self._rng.integers(0, len(path)))]  # (): fresh samples of the prompt
            k = min(self.branch, remaining)
            cuts[parent] = cuts.get(parent, 0) + k  # one request per cut point and wave
            remaining -= k
        return [(t, parent, t.spawn(parent, k)) for parent, k in cuts.items()]

    def _request(self, t: Tree, parent: tuple, k: int) -> Request:
        """k fresh samples of the prompt (parent ()), or one branch continuing node `parent`; a segment
        of `segment_tokens`, or the rest of the response at max_depth."""
        req = t.request
        seg = None if self.max_depth is not None and len(parent) + 1 >= self.max_depth else self.segment_tokens
        sampling = replace(req.sampling, segment_tokens=seg, keep_kv=seg is not None)  # its branches follow at once
        return Request(req.prompt, k, req.purpose, sampling, prefix=t.nodes[parent] if parent else None)

    def state_dict(self) -> dict:
        return {"roots": [[int(k), int(v)] for k, v in self._roots.items()]}

    def load_state_dict(self, state: dict) -> None:
        self._roots = {int(k): int(v) for k, v in state["roots"]}

    def _first_width(self) -> int:
        if self.first_div_max is None or self.first_div_max == self.branch:
            return self.branch
        return int(self._rng.integers(self.branch, self.first_div_max + 1))
