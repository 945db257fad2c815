"""The token-limit and continuation rules every engine applies to a Request (one copy, called by the
torch and vLLM engines alike, and checked by rollwise.testing.check_engine).

    limits(req, prompt_ids, max_tokens, max_context)   what to feed and how far to generate:
        context   prompt + the prefix's tokens (a Request with `prefix` continues that rollout)
        full      new tokens the request may still generate: its max_tokens less the prefix, within
                  the model's context; 0 when the prefix already used the budget (the row then comes
                  back at once with no new tokens, finish "length")
        limit     new tokens this time: `full`, cut to `segment_tokens` (at least 1) when the request
                  has a segment budget
    length_reason(k, full)    how a row that stopped at its limit after k new tokens ended: "length"
                              when its whole budget is spent, else "budget" (a partial to resume)
    status_of(reason)         the Rollout status of a finish reason
    continued(prefix, ...)    the rollout fields of a continuation: the prefix's tokens, log-probs,
                              entropies and versions first, then the new ones

Why one copy: TreePO, APRIL and SPEC-RL resume rows through whichever engine runs, and the ledger
charges a continuation its new tokens only; two engines that disagreed on the budget or on which
tokens come first would train on different data.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..core.types import Lineage, Request, Rollout

# finish_reason -> Rollout status ("stop" and "pruned" come from Engine.stop)
FINISH_STATUS = {"eos": "done", "length": "done", "stop": "done", "budget": "partial", "aborted": "aborted",
                 "pruned": "pruned"}


def check_request(req: Request) -> None:
    """The request shapes an engine takes: n >= 0 samples, exactly one with a prefix."""
    if req.n < 0 or (req.prefix is not None and req.n != 1):
        raise ValueError(f"request {req.id}: n must be >= 0 (and 1 with a prefix), got {req.n}")


@dataclass(frozen=True, slots=True)
class Limits:
    """What an engine feeds and generates for one Request (see the module docstring)."""

    prompt_ids: list[int]
    prefix_ids: list[int]
    full: int
    limit: int

    @property
    def context(self) -> list[int]:
        return self.prompt_ids + self.prefix_ids


def limits(req: Request, prompt_ids: list[int], max_tokens: int, max_context: int) -> Limits:
    """The limits of `req` (prompt already encoded; `max_tokens` its response budget, the request's own
    or the engine's default). A context that leaves no room while tokens are still owed is an error."""
    prefix = req.prefix.token_ids_T.tolist() if req.prefix is not None else []
    ctx = len(prompt_ids) + len(prefix)
    room = max_context - ctx
    if room < 1 and req.n > 0 and max_tokens - len(prefix) > 0:
        raise ValueError(f"prompt of {ctx} tokens leaves no room to generate (model context {max_context})")
    full = max(0, min(max_tokens - len(prefix), room))
    seg = req.sampling.segment_tokens
    return Limits(prompt_ids, prefix, full, full if seg is None else min(full, max(int(seg), 1)))


def length_reason(k: int, full: int) -> str:
    """A row that stopped at its limit (not at EOS) after k new tokens: "length" once its whole budget is
    spent, else "budget" (its segment budget stopped it: a partial to resume)."""
    return "length" if k >= full else "budget"


def status_of(reason: str) -> str:
    return FINISH_STATUS.get(reason, "done")


@dataclass(slots=True)
class Continued:
    token_ids_T: torch.Tensor
    logprobs_T: torch.Tensor
    entropy_T: torch.Tensor | None
    versions_T: torch.Tensor
    lineage: Lineage


def continued(pre: Rollout, tokens_T: torch.Tensor, logprobs_T: torch.Tensor, entropy_T: torch.Tensor | None,
              versions_T: torch.Tensor) -> Continued:
    """A continuation of `pre` with these k new tokens (their log-probs, entropies or None, versions):
    the prefix's values come first and are kept as they were. The rollout keeps the prefix's
    policy_version (its first token's) and carries the prefix in its lineage; it adds only its k new tokens to
    the ledger (the prefix was charged when it was generated)."""
    n = pre.num_tokens
    pv = pre.versions_T if pre.versions_T is not None else torch.full((n,), pre.policy_version, device="cpu")
    ents = torch.cat([prefix_entropy(pre), entropy_T]) if entropy_T is not None else None
    return Continued(torch.cat([pre.token_ids_T, tokens_T]), torch.cat([pre.logprobs_T, logprobs_T]), ents,
                     torch.cat([pv, versions_T]), Lineage(prefix=pre, tokens_by_kind={"decoded": len(tokens_T)}))


def prefix_entropy(pre: Rollout) -> torch.Tensor:
    """The prefix's per-token entropies (its mean repeated where it kept none)."""
    return pre.entropy_T if pre.entropy_T is not None else torch.full((pre.num_tokens,), pre.entropy, device="cpu")
