"""SPEC-RL: speculative rollouts over cached trajectories.

SPEC-RL ("SPEC-RL: Accelerating On-Policy Reinforcement Learning via Speculative Rollouts",
arXiv 2509.23232, code ShopeeLLM/Spec-RL, a verl 0.5 fork). A prompt's rollouts in consecutive epochs
share long prefixes; SPEC-RL takes the prompt's last rollout as a draft, verifies it under the current
policy and regenerates only from the first rejected token.

Rule [CODE: verl/utils/speculative_decoding.py, verl/trainer/ppo/ray_trainer.py; paper Alg. 1]::

    the store keeps each prompt's last trained rollouts y_old with their per-token log-probs p_old
    at the prompt's next visit, for every draft: p_new_i = pi_t(y_old_i | x, y_old_<i), one forward pass
    accept token i  iff  log u_i <= (log p_new_i - log p_old_i) + log l,   u_i ~ U(0, 1)
        (alpha_i = min(1, l * p_new_i / p_old_i); lenience l = e^0.5, the paper's recommended value)
    n = the first rejected position; none rejected: the draft is the rollout, nothing is generated;
    else generate from pi_t after [x, y_old_<n] with max_new_tokens = R_max - n (token n is re-sampled)
    rewards, advantages and the loss are unchanged: single-round verification, the re-sampled token
    drawn from pi_t (not the residual), no importance correction (approximately on-policy)

rollwise's choices [INF]:
  * p_old is the draft's behaviour log-prob as rollwise keeps it (the engine's, or the verification's
    for a reused prefix); the code keeps the trainer's recomputed old log-prob of that step, the same
    policy in synchronous training.
  * the accepted prefix's behaviour log-probs and entropies are the verification pass's, and its tokens
    carry the verifying policy's version: the learner sees the log-probs of the policy that accepted
    them. Verification is at the draft's sampling temperature.
  * acceptance draws come from a generator seeded by (seed, step) (the code reuses seed 1234 every
    step; the spec asks for a fresh stream per step): reproducible, and a resumed run draws the same.
  * drafts per request: a request for n samples of a prompt takes its drafts not yet used this step, in
    order, and asks fresh samples for the rest (AR3PO's stages and DAPO's refills share the list). A
    draft rejected at its first token is a fresh sample. The store keeps the last trained group of each
    prompt, at most `store_tokens` tokens in all, evicting the least recently stored prompt first.

Cost: accepted tokens are charged as kind "draft" (not "decoded"). The budget adds every draft token
the verification scored, accepted or rejected (the prefill reads them all), times `draft_cost`, the
torch engine's prefill/decode cost per token. The default, 0.566, is the ratio recorded by
`OMP_NUM_THREADS=1 python benchmarks/prefill_decode_ratio.py --repeats 11` at the default run's shape
(the embedded tiny model, 256 rows, 10-token drafts, 1 CPU thread; benchmarks/results/
prefill_decode_ratio.json). The machine was shared (load 5-9 on 2 cores): two earlier runs (5 and 7
repeats) gave 0.68 and 0.80 at 10 tokens, 0.60 and 0.48 at 40, so re-measure on a quiet machine, or on
your engine, and pass `draft_cost`. The resumed row's prefill of prompt + accepted prefix counts as prompt
tokens, as for every resumed row.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..control.base import Component, StepContext
from ..control.capabilities import Speculator
from ..core.registry import register
from ..core.types import Group, Lineage, Request, Rollout

MEASURED_DRAFT_COST = 0.566  # benchmarks/results/prefill_decode_ratio.json: "draft_cost" (L = 10, 256 rows)


def first_rejection(logp_new_T: torch.Tensor, logp_old_T: torch.Tensor, log_u_T: torch.Tensor,
                    log_lenience: float) -> int:
    """The first position where log u > (log p_new - log p_old) + log l; the draft's length if none."""
    margin_T = logp_new_T.double() - logp_old_T.double() + log_lenience
    rejected = (log_u_T.double() > margin_T).nonzero()
    return int(rejected[0]) if len(rejected) else int(logp_new_T.numel())


@dataclass
class Draft:
    """A stored rollout: its tokens, behaviour log-probs and what a reused-whole rollout needs."""

    token_ids_T: torch.Tensor
    logprobs_T: torch.Tensor
    text: str
    finish_reason: str
    temperature: float

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids_T.numel())


class RolloutStore:
    """Each prompt's last trained rollouts (prompt ids + drafts), at most `max_tokens` draft tokens in
    all; storing a prompt again replaces its drafts and makes it the most recent."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.entries: OrderedDict[int, tuple[list[int], list[Draft]]] = OrderedDict()
        self.tokens = 0

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, prompt_id: int) -> tuple[list[int], list[Draft]]:
        return self.entries.get(prompt_id, ([], []))

    def put(self, prompt_id: int, prompt_ids: list[int], drafts: list[Draft]) -> None:
        self._drop(prompt_id)
        if not drafts:
            return
        self.entries[prompt_id] = (list(prompt_ids), drafts)
        self.tokens += sum(d.num_tokens for d in drafts)
        while self.tokens > self.max_tokens:  # least recently stored first (possibly this one, if huge)
            self._drop(next(iter(self.entries)))

    def _drop(self, prompt_id: int) -> None:
        old = self.entries.pop(prompt_id, None)
        if old is not None:
            self.tokens -= sum(d.num_tokens for d in old[1])

    def state_dict(self) -> dict:
        return {"entries": [[pid, list(ids), [[d.token_ids_T.numpy().copy(), d.logprobs_T.numpy().copy(), d.text,
                                                d.finish_reason, d.temperature] for d in drafts]]
                            for pid, (ids, drafts) in self.entries.items()]}

    def load_state_dict(self, s: dict) -> None:
        self.entries, self.tokens = OrderedDict(), 0
        for pid, ids, drafts in s["entries"]:
            self.put(int(pid), [int(t) for t in ids],
                     [Draft(torch.as_tensor(tok, dtype=torch.long).clone(),
                            torch.as_tensor(lp, dtype=torch.float32).clone(), str(text), str(reason), float(temp))
                      for tok, lp, text, reason, temp in drafts])


@register("planner", "spec-rl", provenance="CODE+INF",
          summary="SPEC-RL: verify the last rollouts as drafts in one prefill, regenerate from the first rejection")
class SpecRL(Component):
    """Speculative rollouts over cached trajectories. `lenience`: l of the acceptance rule (> 0; inf
    accepts every draft whole); `draft_cost`: a verified draft token's cost in decoded tokens (default:
    the torch engine's measured prefill/decode ratio, 0.566); `seed`: of the acceptance draws;
    `store_tokens`: the store's bound in draft tokens. Composes with selectors, allocators and filters
    (`ar3po+spec-rl`, `greso+spec-rl`, `spec-rl+dapo`); not with partial rollouts (april)."""

    needs_sampling = True  # it runs the rounds' requests itself (draft rows resumed from a prefix)
    needs_policy = True  # the verification is a forward pass of the current policy

    def __init__(self, lenience: float = math.exp(0.5), draft_cost: float = MEASURED_DRAFT_COST, seed: int = 0,
                 store_tokens: int = 4_000_000):
        if not lenience > 0 or not 0 <= draft_cost < math.inf or store_tokens < 1:
            raise ValueError("spec-rl: need lenience > 0, 0 <= draft_cost < inf and store_tokens >= 1")
        self.lenience, self.draft_cost, self.seed = float(lenience), float(draft_cost), int(seed)
        self.declares = (Speculator(self.draft_cost),)
        self.log_lenience = math.log(self.lenience)
        self.store = RolloutStore(int(store_tokens))
        self._used: dict[int, int] = {}  # drafts of each prompt taken this step
        self._rng = np.random.default_rng([self.seed, 0])
        self._stats = np.zeros(4)  # this step: drafts, draft tokens, accepted tokens, drafts accepted whole

    def begin_step(self, ctx: StepContext) -> None:
        self._used = {}
        self._rng = np.random.default_rng([self.seed, ctx.step])
        self._stats = np.zeros(4)

    # ---- one round: verify the drafts, resume them from their first rejection -------------------
    def speculate(self, requests: list[Request], ctx: StepContext):
        taken = [self._take(r) for r in requests]  # per request: (prompt ids, its drafts)
        rows = [(i, ids, d) for i, (ids, ds) in enumerate(taken) for d in ds]
        if not rows:
            return (yield requests)
        if ctx.score_drafts is None:
            raise ValueError("spec-rl needs the policy to verify its drafts (ctx.score_drafts); this host has none")
        logp_new, ent_new, version = ctx.score_drafts([ids for _, ids, _ in rows], [d.token_ids_T for _, _, d in rows],
                                                      [d.temperature for _, _, d in rows])
        wave, owner = [], []  # the requests to generate, and the index of the request each one serves
        fresh = [r.n - len(ds) for r, (_, ds) in zip(requests, taken)]
        for (i, ids, d), lp_T, ent_T in zip(rows, logp_new, ent_new):
            log_u_T = torch.from_numpy(np.log(self._rng.random(d.num_tokens)))
            n = first_rejection(lp_T, d.logprobs_T, log_u_T, self.log_lenience)
            self._stats += [1, d.num_tokens, n, n == d.num_tokens]
            if n == 0:  # rejected at once: a fresh sample
                fresh[i] += 1
                continue
            wave.append(Request(requests[i].prompt, 1, requests[i].purpose, requests[i].sampling,
                                prefix=self._accepted(requests[i], ids, d, n, lp_T, ent_T, version)))
            owner.append(i)
        for i, r in enumerate(requests):
            if fresh[i] > 0:
                wave.append(r if fresh[i] == r.n else replace(r, n=fresh[i]))
                owner.append(i)
        drafts, tokens, accepted, whole = self._stats
        ctx.metrics.update({"spec/drafts": float(drafts), "spec/accept_rate": float(accepted / max(tokens, 1)),
                            "spec/whole_rate": float(whole / max(drafts, 1))})
        groups = yield wave
        out = [Group(r.prompt) for r in requests]
        for i, g in zip(owner, groups):
            out[i].rollouts.extend(g.rollouts)
        return out

    def _take(self, req: Request) -> tuple[list[int], list[Draft]]:
        """This request's drafts: the prompt's stored ones not yet used this step, at most n."""
        if req.purpose != "train" or req.prefix is not None:
            return [], []
        ids, drafts = self.store.get(req.prompt.id)
        start = self._used.get(req.prompt.id, 0)
        mine = drafts[start: start + req.n]
        self._used[req.prompt.id] = start + len(mine)
        return ids, mine

    @staticmethod
    def _accepted(req: Request, prompt_ids: list[int], d: Draft, n: int, logp_T: torch.Tensor, ent_T: torch.Tensor,
                  version: int) -> Rollout:
        """The draft's first n tokens with the verification's log-probs: the prefix a row resumes from,
        or (n = the whole draft) the finished rollout itself, which the driver returns as is."""
        whole = n == d.num_tokens
        return Rollout(
            prompt_id=req.prompt.id, prompt_ids=list(prompt_ids), token_ids_T=d.token_ids_T[:n].clone(),
            logprobs_T=logp_T[:n].clone(), text=d.text if whole else "",
            finish_reason=d.finish_reason if whole else "budget", policy_version=version, purpose=req.purpose,
            entropy=float(ent_T[:n].mean()), status="done" if whole else "partial", temperature=d.temperature,
            entropy_T=ent_T[:n].clone(), lineage=Lineage(tokens_by_kind={"draft": n}))

    # ---- the store: refreshed with every trained group ------------------------------------------
    def observe(self, groups: list[Group], batch, ctx: StepContext) -> None:
        for g in batch.groups:
            rows = [r for r in g.rollouts if isinstance(r, Rollout) and r.status == "done" and r.num_tokens > 0
                    and r.purpose == "train"]
            if rows:
                self.store.put(g.prompt.id, rows[0].prompt_ids,
                               [Draft(r.token_ids_T.detach().clone(), r.logprobs_T.detach().float().clone(), r.text,
                                      r.finish_reason, float(r.temperature)) for r in rows])

    def state_dict(self) -> dict:
        return {"store": self.store.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.store.load_state_dict(state["store"])
