"""Declared capabilities (control/capabilities.py): the Planner composes from `declares` alone.

The last test is the architecture's claim made concrete: a new in-flight method, "stop a sample k tokens
after it wrote the answer marker", is one file (tests/past_marker.py: one Component and its WaveWatch)
and runs by import path through the real planner and driver, alone and composed with DUET's abort,
with no framework file touched."""
import numpy as np
import pytest

from rollwise.control.base import Component, build_planner
from rollwise.control.capabilities import CONFLICTS, Partial, Speculator, Staged, Watcher, check, declared, find
from rollwise.core import registry

from fakes import TokenEngine, make_ctx, run_step


class _C(Component):
    def __init__(self, name, *caps):
        self.name, self.declares = name, caps


@pytest.mark.parametrize("a,b,ok", [
    (Partial(1.0), Staged(), False), (Partial(1.0), Watcher(), False), (Partial(1.0), Speculator(), False),
    (Speculator(), Speculator(), False), (Speculator(), Watcher(hidden=True), False),
    (Watcher(), Watcher(hidden=True), True), (Staged(), Watcher(), True), (Staged(), Speculator(), True),
    (Staged(), Staged(), True),
])
def test_the_conflict_table_by_hand(a, b, ok):
    for first, second in ((a, b), (b, a)):  # symmetric
        comps = [_C("x", first), _C("y", second)]
        if ok:
            check(comps, "x+y", Component)
        else:
            with pytest.raises(ValueError, match=rf"planner 'x\+y': \w+ \(\w+\) does not compose with \w+ \(\w+\): "):
                check(comps, "x+y", Component)


def test_every_conflict_names_its_reason():
    assert all(why and a is not None and b is not None for a, b, why in CONFLICTS)


def test_a_hook_overridden_without_its_declaration_is_refused():
    class Sneaky(Component):
        name = "sneaky"

        def more(self, groups, ctx):
            return []

    with pytest.raises(ValueError, match=r"sneaky overrides more\(\) but does not declare it: add declares = \(Staged\(\),\)"):
        check([Sneaky()], "sneaky", Component)


@pytest.mark.parametrize("attr,instead", [("partial", "Partial"), ("needs_inflight", "Watcher()"),
                                          ("needs_resume", "Resumable()")])
def test_removed_attributes_name_their_replacement(attr, instead):
    Old = type("Old", (Component,), {"name": "old", attr: True})
    with pytest.raises(ValueError, match=rf"old: the component attribute '{attr}' was removed in 0.4; declares = \({instead}"):
        check([Old()], "old", Component)


def test_declarations_must_be_capabilities():
    with pytest.raises(ValueError, match="declares must hold capabilities"):
        declared(_C("bad", "Watcher"))


def test_every_registered_planner_component_declares_what_its_hooks_do():
    """The contract over the registry: each component passes the check alone, and the Planner's view of it
    (partial, speculator, in-flight) comes from its declarations."""
    for name in [e.name for e in registry.entries("planner")]:
        p = build_planner(name, 8, np.random.default_rng(0))
        (c,) = p.components
        assert p.partial == bool(find([c], Partial)) and p.needs_inflight == bool(find([c], Watcher))
        assert (p.speculator is c) == bool(find([c], Speculator))


# ---- a new in-flight method in one file (tests/past_marker.py), run by import path ------------------------
def test_a_new_inflight_method_is_one_file():
    """Rows of 12 tokens; rows of prompt 0 write the marker 99 at position 3, so each stops 2 tokens later,
    at 6 tokens; prompt 1's rows never write it and run to 12. Composed with DUET's abort (which would prune
    nothing here: its length gate is far), the same stops land."""
    for spec in ("past_marker:StopPastMarker", "past_marker:StopPastMarker+duet-abort"):
        ctx = make_ctx(pool_size=2, B=2, n=2)
        eng = TokenEngine(lambda pid, j: 12, rates={0: 0.5, 1: 0.5},
                          script=lambda pid, j: [0, 1, 2, 99] if pid == 0 else None)
        opts = {"duet-abort": {"h_abort": 1000, "marker": [99]}} if "duet" in spec else {}
        planner = build_planner(spec, 2, ctx.rng, opts)
        batch, _, _ = run_step(planner, ctx, eng)
        lens = {g.prompt.id: [r.num_tokens for r in g.rollouts] for g in batch.groups}
        assert lens == {0: [6, 6], 1: [12, 12]}, spec
        assert ctx.ledger.count() == eng.decoded == 6 + 6 + 12 + 12
