"""The Engine protocol (Generate): what the step driver needs from anything that samples.

    submit(requests)                 queue requests (the driver has set each Request.id)
    poll(max_steps=None)             advance generation and return events: Finished for every request
                                     whose n samples are all done, then Progress for requests still
                                     running. max_steps=None runs until everything submitted is done
                                     (synchronous mode: "submit all, poll until done").
    abort(request_ids)               stop those requests now: Finished events whose rollouts hold the
                                     tokens and log-probs generated so far (status "aborted")
    update_weights(version, state)   the learner's new weights; state None = shared in memory
    pending                          number of submitted requests not yet finished

Optional, in-flight control of single samples (DUET's marker-gated abort needs it; an engine without it
is refused by name when a planner asks for it):

    peek(request_ids)                {request id: [token ids each sample has generated so far in this
                                     request (a 1-D LongTensor), or None for a sample that has stopped]}
                                     for those of the requests that are running
    stop(request_id, samples, reason)  end these samples of a running request now, keeping their tokens:
                                     reason "stop" ends them as done rows (finish_reason "stop": scored and
                                     trained like an EOS), "pruned" as dropped rows (status and finish_reason
                                     "pruned"; the driver charges their tokens to fate "pruned"). They come
                                     back in the request's Finished event, with its other samples.

An engine that also declares `hidden_states = True` (the torch engine) takes `submit(requests, hidden=True)`
and then answers `peek(request_ids, hidden=True)` with a pair (tokens_T, h_D) per running sample: the last
layer's hidden state at its last token, read from the decode state (ARRoL's quality head needs it).

Engines never touch the ledger: the driver charges what comes back, when it comes back. The built-in
torch engine, the simulator and the test fakes implement this; `build_engine` resolves one by name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..core.types import Group, Request

STOP_REASONS = ("stop", "pruned")  # how `stop` may end a sample


@dataclass(slots=True)
class Finished:
    """A request that is done (or aborted): its n rollouts as one Group, and the prompt tokens
    prefilled for it (the prompt once, plus a resumed prefix)."""

    request: Request
    group: Group
    prompt_tokens: int = 0


@dataclass(slots=True)
class Progress:
    """A request still running after a poll: tokens generated so far by each of its samples."""

    request: Request
    tokens: list[int] = field(default_factory=list)


@runtime_checkable
class Engine(Protocol):
    version: int

    def submit(self, requests: list[Request]) -> None: ...

    def poll(self, max_steps: int | None = None) -> list: ...

    def abort(self, request_ids) -> list[Finished]: ...

    def update_weights(self, version: int, state_dict=None) -> None: ...

    @property
    def pending(self) -> int: ...


def request_params(req: Request, temperature: float, top_p: float, max_new_tokens: int) -> tuple[float, float, int]:
    """(temperature, top_p, max_tokens) of a request: its own SamplingParams, else the engine's defaults."""
    s = req.sampling
    t = temperature if s.temperature is None else float(s.temperature)
    p = top_p if s.top_p is None else float(s.top_p)
    m = max_new_tokens if s.max_tokens is None else int(s.max_tokens)
    if not t >= 0 or not 0 < p <= 1 or m < 0:
        raise ValueError(f"request {req.id}: need temperature >= 0, 0 < top_p <= 1, max_tokens >= 0")
    return t, p, m


def run_sync(engine: Engine, requests: list[Request]) -> list[Finished]:
    """Submit all, poll until done; Finished events in request order (ids must be unique)."""
    if not requests:
        return []
    engine.submit(requests)
    done: dict[int, Finished] = {}
    while len(done) < len(requests):
        events = engine.poll()
        if len(events) == len(requests) and not done and all(  # the usual case: one poll, in order
                type(e) is Finished and e.request is r for e, r in zip(events, requests)):
            return events
        finished = [e for e in events if isinstance(e, Finished)]
        if not finished and not engine.pending:
            raise RuntimeError(f"engine {type(engine).__name__} stopped with {len(requests) - len(done)} "
                               "requests unanswered")
        for e in finished:
            done[e.request.id] = e
    return [done[r.id] for r in requests]


def number(requests: list[Request], start: int = 0) -> int:
    """Give requests consecutive ids from `start`; returns the next free id."""
    for i, r in enumerate(requests):
        r.id = start + i
    return start + len(requests)


def build_engine(name: str, **kwargs):
    """The engine class registered as `name` (or imported from 'module:Class'), built with kwargs.
    An unknown name is an error listing the known ones."""
    from ..core import registry

    return registry.get("engine", name).obj(**kwargs)
