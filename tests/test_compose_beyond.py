"""Which compositions of the beyond-seed allocators (knapsack, speed-rl, pods, vip) build and which are
refused by name (their `compose` hooks, control/base.py refuse_allocators), and that an allocator keeps
the n = 0 a component before it gave a prompt it holds back (replay+knapsack, replay+vip)."""
import numpy as np
import pytest

from rollwise.control.base import build_planner, sets_n
from rollwise.core.types import Group

from fakes import R, make_ctx

# (spec, planner_options, what the one-line error must say): both components and why
REFUSED = [
    ("knapsack+ar3po", {}, r"knapsack does not compose with ar3po: ar3po is a staged sampler"),
    ("ar3po+knapsack", {}, r"knapsack does not compose with ar3po: ar3po is a staged sampler"),
    ("knapsack+aero", {}, r"knapsack does not compose with aero: aero is a staged sampler"),
    ("knapsack+dars", {}, r"knapsack does not compose with dars: dars is a staged sampler .* beyond the n knapsack"),
    ("knapsack+cures", {}, r"knapsack does not compose with cures: both set each prompt's number of rollouts"),
    ("e3+knapsack", {}, r"knapsack does not compose with e3: both set each prompt's number of rollouts"),
    ("knapsack+vip", {}, r"knapsack does not compose with vip: both set"),
    ("vip+knapsack", {}, r"vip does not compose with knapsack: both set"),
    ("knapsack+speed-rl", {}, r"knapsack does not compose with speed-rl: both set"),
    ("speed-rl+knapsack", {}, r"speed-rl does not compose with knapsack: both set"),
    ("speed-rl+cures", {}, r"speed-rl does not compose with cures: both set"),
    ("speed-rl+ar3po", {}, r"speed-rl does not compose with ar3po: ar3po is a staged sampler"),
    ("speed-rl+dars", {}, r"speed-rl does not compose with dars: dars is a staged sampler"),
    ("speed-rl+replay", {}, r"speed-rl does not compose with replay: replay holds drawn prompts back"),
    ("replay+speed-rl", {}, r"speed-rl does not compose with replay"),
    ("pods+speed-rl", {}, r"pods does not compose with speed-rl after it: pods would trim each group before"),
    ("arrol+knapsack", {}, r"knapsack does not compose with arrol before it: .* \(knapsack\+arrol\)"),
    ("arrol+vip", {}, r"vip does not compose with arrol before it"),
    ("arrol+speed-rl", {}, r"speed-rl does not compose with arrol before it"),
    ("knapsack+pods", {"pods": {"n": 8}}, r"knapsack does not compose with pods: both set"),
    ("pods+ar3po", {"pods": {"n": 8}}, r"pods does not compose with ar3po: ar3po is a staged sampler"),
    ("speed-rl+pods", {"pods": {"n": 8}}, r"speed-rl does not compose with pods: both set"),
]

BUILDS = ["knapsack+duet-abort", "greso+knapsack", "knapsack+dapo", "knapsack+pods", "knapsack+arrol",
          "replay+knapsack", "knapsack+replay", "depo+knapsack", "knapsack+popo", "speed-rl+dapo", "speed-rl+pods",
          "greso+speed-rl", "speed-rl+duet-abort", "speed-rl+arrol", "greso+pods", "pods+dapo", "ar3po+pods",
          "vip+pods", "vip+arrol", "replay+vip"]


@pytest.mark.parametrize("spec,options,why", REFUSED)
def test_conflicting_allocators_are_refused_by_name(spec, options, why):
    with pytest.raises(ValueError, match=why) as e:
        build_planner(spec, 8, np.random.default_rng(0), options)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("spec", BUILDS)
def test_compatible_compositions_build(spec):
    assert len(build_planner(spec, 8, np.random.default_rng(0)).components) == 2


def test_which_components_set_n():
    def one(name, **options):
        return build_planner(name, 8, np.random.default_rng(0), {name: options}).components[0]

    assert [sets_n(one(k)) for k in ("knapsack", "vip", "speed-rl", "cures", "ar3po", "dars")] == [True] * 6
    assert [sets_n(one(k)) for k in ("replay", "depo", "dots", "arrol", "greso", "dapo", "pods")] == [False] * 7
    assert sets_n(one("pods", n=8))  # with its own n, PODS sets it


def _history_ctx():
    """Six prompts, B = 4, n = 4: prompts 0-3 last passed 1/2, 1/4, 3/4, 1 (knapsack's hand case:
    budget 16 -> n = 5, 6, 3, 2); prompts 4 and 5 last passed 1/2."""
    ctx = make_ctx(pool_size=6, B=4, n=4, step=1)
    for pid, wins in [(0, [1, 0]), (1, [1, 0, 0, 0]), (2, [1, 1, 1, 0]), (3, [1, 1]), (4, [1, 0]), (5, [0, 1])]:
        ctx.history.record([Group(ctx.pool[pid], [R(pid, w) for w in wins])], step=0)
    return ctx


def test_knapsack_after_replay_keeps_the_prompts_replay_held_back():
    """replay (empty buffer, B = 4) generates the first 4 of 6 drawn prompts and gives the last 2 n = 0; the
    knapsack then spends the 16 rollouts of those 4 alone (before: prompts 4 and 5 got n_min = 2 each)."""
    ctx = _history_ctx()
    planner = build_planner("replay+knapsack", 6, np.random.default_rng(0),
                            {"knapsack": {"n_min": 2, "n_max": 8, "fallback": False}})
    planner.begin_step(ctx)
    assert planner.allocate(ctx.pool, ctx) == [5, 6, 3, 2, 0, 0]


def test_vip_after_replay_keeps_the_prompts_replay_held_back():
    from rollwise.control.vip import allocate_variance

    ctx = _history_ctx()
    planner = build_planner("replay+vip", 6, np.random.default_rng(0))
    planner.begin_step(ctx)
    ns = planner.allocate(ctx.pool, ctx)
    assert ns[4:] == [0, 0] and sum(ns) == 16
    vip = planner.components[1]
    assert ns[:4] == allocate_variance(vip.predict([0, 1, 2, 3], ctx), 16, 2, 16).tolist()
