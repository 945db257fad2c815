"""The Engine protocol (Generate): what the step driver and the Trainer need from anything that samples.

rollwise.testing.check_engine(make_engine) checks an engine against every rule below (docs/engines.md).

Methods (the step driver's):

    submit(requests)                 queue requests; the driver has set each Request.id (unique among the
                                     requests in flight). A Request asks for n >= 0 samples of its prompt,
                                     with its own SamplingParams (None fields: the engine's defaults), and
                                     optionally a `prefix` (then n must be 1; ValueError otherwise)
    poll(max_steps=None)             advance generation by at most max_steps decode steps (about one token
                                     per running sample each) and return a Finished event for every request
                                     whose samples have all ended; max_steps=None runs until everything
                                     submitted has finished ("submit all, poll until done": run_sync)
    abort(request_ids)               end those requests now: a Finished event for each one still held, its
                                     rows holding the tokens and log-probs generated so far
    update_weights(version, state_dict=None)   sample from then on with the policy's current weights
                                     (state_dict None: the learner updated the shared policy in place) or
                                     with these weights; rollouts started after it carry `version`
    pending                          number of submitted requests not yet returned
    version                          the policy version new rollouts carry

A policy engine (one the Trainer can use; the simulator's is not) also has:

    for_policy(policy, *, temperature=1.0, top_p=1.0, max_new_tokens=16, seed=0, **options)
                                     a classmethod that builds it over a rollwise Policy. The Trainer passes
                                     those four keywords (the run's) and `engine_options` as further
                                     keywords; an engine that shares something per policy (vLLM's instance)
                                     shares it here. Evaluation builds extra engines with temperature 0.
    state_dict() / load_state_dict(s)  its random streams: a fresh engine built with the same keywords that
                                     loads the state draws the same samples as the one that saved it (the
                                     Trainer checkpoints it between steps, when nothing is in flight)

What comes back (every Finished event, whichever method returns it):

  * One Finished(request, group, prompt_tokens) per Request, exactly once (from poll or abort); the
    Group's prompt is the request's. run_sync puts them in request order.
  * The group holds the request's n rows, in sample order; fewer only after an abort (a sample aborted
    before its first token is left out, so a request aborted while queued comes back with 0 rows).
  * Each row is a Rollout: token_ids_T (LongTensor [T], response only) and logprobs_T (float [T], the
    behaviour log-probs log softmax(logits / T) of each sampled token under the weights that sampled it;
    greedy rows at T = 1, and `temperature` is that T), entropy_T None or [T] with `entropy` its mean,
    prompt_ids the prompt's encoding, prompt_id, purpose the request's, fate "new", all on the CPU.
  * It ends (finish_reason -> status): "eos" -> "done" (the EOS token is its last token; no EOS before
    it); "length" -> "done" (its whole max_tokens spent); "budget" -> "partial" (its segment budget
    stopped it: continue it with a prefix); "aborted" -> "aborted"; and, through stop, "stop" -> "done"
    and "pruned" -> "pruned". The new tokens never exceed the request's max_tokens (less a prefix).
  * policy_version is the engine's version when the row started; versions_T (None when every token has
    it) gives each token's version.
  * prompt_tokens: the tokens prefilled for the request (the prompt once for its n samples, plus a
    prefix; fewer when KV is reused); 0 for a request with n = 0 or aborted before it started.

Continuing a partial (Request.prefix = a Rollout; continuation.py holds the rules, shared by the engines):
the engine prefills prompt + prefix tokens and generates at most max_tokens - len(prefix) new tokens
(cut to segment_tokens, at least 1, when set). The row it returns starts with the prefix's tokens,
log-probs, entropies and versions unchanged, keeps the prefix's policy_version, and carries the prefix
in lineage.prefix with lineage.tokens_by_kind = {"decoded": new tokens}. A prefix that already used
the whole budget comes back at once with no new tokens (finish "length"). `keep_kv=True` on such a
request only lets an engine keep the row's KV for it (the torch engine's PrefixKV): the samples are
the same either way.

Optional, declared as typed capabilities (generate/capabilities.py) in the engine's `capabilities`
tuple; the driver reads only the declarations and refuses, by name, a wave that asks for one the engine
does not declare, and the kit checks each declared one:

  InFlight():
    peek(request_ids)                {request id: [the 1-D LongTensor of tokens each sample has generated
                                     so far, or None for a sample that has stopped]} for those of the
                                     requests still running (a watcher reads them)
    stop(request_id, samples, reason)  end these samples of a running request now, keeping their tokens:
                                     reason "stop" ends them as done rows (finish_reason "stop": scored and
                                     trained like an EOS), "pruned" as dropped rows (status and finish_reason
                                     "pruned"; the driver charges their tokens to fate "pruned"). They come
                                     back in the request's Finished event, with its other samples. Another
                                     reason, or a request not running, is a ValueError.
  Drafts():
                                     also takes submit(requests, drafter=f): each running row's next tokens
                                     proposed by f(request, sample, tokens_so_far) -> [token ids] are
                                     verified by the policy with exact sampling (the rows keep the plain
                                     decoder's distribution); kept draft tokens are kind "draft" in the row's
                                     lineage and Finished.verified_tokens counts every draft token scored
  HiddenStates():
                                     also takes submit(requests, hidden=True) and then answers
                                     peek(request_ids, hidden=True) with a pair (tokens_T, h_D) per running
                                     sample: the last layer's hidden state at its last token

A new engine-side method is a new EngineCapability: the submit keywords it takes (a component passes
them in Wave.options), how the driver charges what it reports, and its conformance check.

Engines never touch the ledger: the driver charges what comes back, when it comes back. Engines are
registered by name (`@register("engine", name, ...)`; `--engine name` or `module:Class`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..core.types import Group, Request

STOP_REASONS = ("stop", "pruned")  # how `stop` may end a sample


@dataclass(slots=True)
class Finished:
    """A request that is done (or aborted): its n rollouts as one Group, the prompt tokens prefilled
    for it (the prompt once, plus a resumed prefix) and, for a request decoded with a drafter, every
    draft token the verification scored, kept or not."""

    request: Request
    group: Group
    prompt_tokens: int = 0
    verified_tokens: int = 0


@runtime_checkable
class Engine(Protocol):
    """What the step driver calls (see the module docstring for the rules)."""

    version: int

    def submit(self, requests: list[Request]) -> None: ...

    def poll(self, max_steps: int | None = None) -> list[Finished]: ...

    def abort(self, request_ids) -> list[Finished]: ...

    def update_weights(self, version: int, state_dict=None) -> None: ...

    @property
    def pending(self) -> int: ...


@runtime_checkable
class PolicyEngine(Engine, Protocol):
    """An Engine the Trainer builds over its policy and checkpoints."""

    @classmethod
    def for_policy(cls, policy, *, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 16,
                   seed: int = 0, **options) -> "PolicyEngine": ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, s: dict) -> None: ...


def request_params(req: Request, temperature: float, top_p: float, max_new_tokens: int) -> tuple[float, float, int]:
    """(temperature, top_p, max_tokens) of a request: its own SamplingParams, else the engine's defaults."""
    s = req.sampling
    t = temperature if s.temperature is None else float(s.temperature)
    p = top_p if s.top_p is None else float(s.top_p)
    m = max_new_tokens if s.max_tokens is None else int(s.max_tokens)
    if not t >= 0 or not 0 < p <= 1 or m < 0:
        raise ValueError(f"request {req.id}: need temperature >= 0, 0 < top_p <= 1, max_tokens >= 0")
    return t, p, m


def run_sync(engine: Engine, requests: list[Request], **submit) -> list[Finished]:
    """Submit all, poll until done; Finished events in request order (ids must be unique). `submit`:
    the optional submit keywords (drafter=...) of capabilities the engine declares."""
    if not requests:
        return []
    engine.submit(requests, **submit)
    done: dict[int, Finished] = {}
    while len(done) < len(requests):
        events = engine.poll()
        if len(events) == len(requests) and not done and all(  # the usual case: one poll, in order
                e.request is r for e, r in zip(events, requests)):
            return events
        if not events and not engine.pending:
            raise RuntimeError(f"engine {type(engine).__name__} stopped with {len(requests) - len(done)} "
                               "requests unanswered")
        for e in events:
            done[e.request.id] = e
    return [done[r.id] for r in requests]


def number(requests: list[Request], start: int = 0) -> int:
    """Give requests consecutive ids from `start`; returns the next free id."""
    for i, r in enumerate(requests):
        r.id = start + i
    return start + len(requests)


# names that were public once: importing one says what replaced it
_REMOVED = {
    "Progress": "poll returns only Finished events; a running request's tokens come from the optional "
                "peek(request_ids)",
    "build_engine": "use rollwise.core.registry.get('engine', name).obj.for_policy(policy, **options)",
}


def __getattr__(name: str):
    if name in _REMOVED:
        raise ImportError(f"rollwise.generate.engine.{name} was removed: {_REMOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
