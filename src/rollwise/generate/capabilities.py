"""What an engine offers beyond the Engine protocol, declared: typed engine capabilities.

An engine lists them in `capabilities`, a tuple of the instances below (a class attribute, or set per
instance where its options decide). The step driver reads nothing else: a Wave asks for submit options
(`Wave.options`, the keywords of `engine.submit`) and for in-flight control (`Wave.watch`, `Wave.hidden`),
and the driver refuses, in one line naming the engine and what is missing, a wave that asks for what the
engine does not declare. `rollwise.testing.check_engine` runs every declared capability's `check` against
the engine, so a declaration is a promise the kit holds the engine to.

    InFlight()        peek(request_ids) / stop(request_id, samples, reason): single samples in flight
    HiddenStates()    submit(..., hidden=True) and peek(..., hidden=True): each running sample's hidden state
    Drafts()          submit(..., drafter=f): speculative decoding, each draft verified with exact sampling
    OwnDrafts()       the engine drafts every row itself (vLLM's ngram): charged on every wave, asked or not

A new engine-side method (shared-prompt prefill, tail batching, a vLLM drafter) is a new capability: a
subclass here or in its own module, with the submit keywords it takes (`options`), how the driver charges
what it reports (`charge`: ledger methods only) and what the kit checks (`check`). Its component puts the
keywords in `Wave.options`; its engine declares it and takes them. No framework file changes
(tests/test_engine_capabilities.py defines one in the test file and runs it through the driver).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class EngineCapability:
    """One optional part of the Engine protocol an engine declares. `name`: how check_engine's
    `capabilities=` names it; `title`: the name of its conformance check; `options`: the submit keywords it
    takes; `methods`: the engine methods it adds; `needs_policy`: its check needs a policy engine;
    `offers`: what it lets an engine do, for the driver's refusal ("engine X does not <offers>, which this
    planner needs")."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    options: ClassVar[tuple[str, ...]] = ()
    methods: ClassVar[tuple[str, ...]] = ()
    needs_policy: ClassVar[bool] = False
    offers: ClassVar[str] = "offer this capability"
    always: ClassVar[bool] = False  # charged on every wave (`charged`), not only on waves that ask for it
    # (Drafts makes it a field: Drafts(always=True))

    def charge(self, ledger, events: list) -> None:
        """Charge what the engine reported for a wave that used this capability (Finished events), through
        ledger methods only. Most capabilities charge nothing beyond the rows the driver charges."""

    def check(self, kit) -> None:
        """The conformance check of this capability (rollwise.testing.engine_kit's `_Kit` is passed: its
        helpers build requests and engines). A capability with no check of its own passes."""


@dataclass(frozen=True)
class InFlight(EngineCapability):
    """peek(request_ids) shows each running sample's tokens; stop(request_id, samples, "stop" | "pruned") ends
    single samples keeping their tokens."""

    name: ClassVar[str] = "inflight"
    title: ClassVar[str] = "peek and stop"
    methods: ClassVar[tuple[str, ...]] = ("peek", "stop")
    offers: ClassVar[str] = ("offer in-flight control of single samples (the Engine protocol's optional "
                             "peek/stop)")

    def check(self, kit) -> None:
        kit.inflight()


@dataclass(frozen=True)
class HiddenStates(EngineCapability):
    """submit(requests, hidden=True), then peek(request_ids, hidden=True) gives a pair (tokens_T, h_D) per
    running sample: the last layer's hidden state at its last token."""

    name: ClassVar[str] = "hidden_states"
    title: ClassVar[str] = "hidden states"
    options: ClassVar[tuple[str, ...]] = ("hidden",)
    methods: ClassVar[tuple[str, ...]] = ("peek",)
    offers: ClassVar[str] = ("expose hidden states in flight (the Engine protocol's optional submit/peek with "
                             "hidden=True)")

    def check(self, kit) -> None:
        kit.hidden()


@dataclass(frozen=True)
class Drafts(EngineCapability):
    """submit(requests, drafter=f): f(request, sample, tokens_so_far) -> [token ids] proposes each running
    row's next tokens, verified by the policy with exact sampling; kept draft tokens are kind "draft" in the
    row's lineage and Finished.verified_tokens counts every draft token scored, kept or not."""

    name: ClassVar[str] = "drafts"
    title: ClassVar[str] = "drafts"
    options: ClassVar[tuple[str, ...]] = ("drafter",)
    needs_policy: ClassVar[bool] = True
    offers: ClassVar[str] = "verify drafts (the Engine protocol's optional submit(requests, drafter=...))"
    # True: every wave is charged the drafts its Finished events report, drafter or not (vLLM's history
    # drafts: vLLM may score padding drafts for any row, generate/vllm_drafts.py)
    always: bool = False

    def charge(self, ledger, events: list) -> None:
        # drafts scored inside the engine's decode passes: no prompt tokens of their own
        ledger.charge_verified(0, sum(e.verified_tokens for e in events))

    def check(self, kit) -> None:
        kit.drafts()


@dataclass(frozen=True)
class OwnDrafts(EngineCapability):
    """The engine drafts every row itself, with no drafter asked of it (vLLM's `ngram` method): rows and
    Finished events are as under Drafts (kept draft tokens of kind "draft", Finished.verified_tokens every
    draft token scored), and every wave is charged for them, whatever it asked."""

    name: ClassVar[str] = "own_drafts"
    title: ClassVar[str] = "own drafts"
    always: ClassVar[bool] = True
    offers: ClassVar[str] = "draft rows itself"

    def charge(self, ledger, events: list) -> None:
        ledger.charge_verified(0, sum(e.verified_tokens for e in events))


def charged(engine, used: list[EngineCapability]) -> list[EngineCapability]:
    """The capabilities whose charge a wave pays: those it used (`serving`), then those the engine applies
    to every wave (`always`), each once."""
    return list(used) + [c for c in declared(engine) if c.always and c not in used]


def declared(engine) -> tuple[EngineCapability, ...]:
    """The capabilities an engine declares (its `capabilities`), checked to be EngineCapability instances."""
    caps = tuple(getattr(engine, "capabilities", ()) or ())
    for c in caps:
        if not isinstance(c, EngineCapability):
            raise ValueError(f"engine {type(engine).__name__}: capabilities must hold engine capabilities "
                             f"(rollwise.generate.capabilities), got {c!r}")
    return caps


def find(engine, kind: type) -> EngineCapability | None:
    """The engine's declaration of `kind`, or None."""
    return next((c for c in declared(engine) if isinstance(c, kind)), None)


def require(engine, kind: type) -> EngineCapability:
    """The engine's declaration of `kind`, or a one-line refusal naming the engine and what it lacks."""
    cap = find(engine, kind)
    if cap is None:
        raise ValueError(f"engine {type(engine).__name__} does not {kind.offers}, which this planner needs "
                         f"(an engine declares it: capabilities = ({kind.__name__}(), ...))")
    return cap


def serving(engine, options: dict) -> list[EngineCapability]:
    """The engine's capabilities that take these submit options (each option must be taken by one), in
    declaration order; a keyword no declared capability takes is refused in one line, naming the capability
    that would take it when one is known."""
    caps = declared(engine)
    used = []
    for key in options:
        cap = next((c for c in caps if key in c.options), None)
        if cap is None:
            known = next((k for k in _known() if key in k.options), None)
            if known is not None:
                require(engine, known)
            raise ValueError(f"engine {type(engine).__name__} does not take the submit option {key!r}, which this "
                             "planner needs (no engine capability it declares takes it)")
        if cap not in used:
            used.append(cap)
    return used


def known() -> dict[str, type]:
    """name -> EngineCapability class, for every capability defined so far (a third party's included)."""
    return {k.name: k for k in _known() if k.name}


def _known() -> list[type]:
    """Every EngineCapability class defined so far (a third party's included), most derived last."""
    out, todo = [], list(EngineCapability.__subclasses__())
    while todo:
        k = todo.pop(0)
        out.append(k)
        todo += k.__subclasses__()
    return out
