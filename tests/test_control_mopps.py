"""MoPPS (control/mopps.py): the forgetting Beta update by hand, the Thompson draw from the planner's stream,
the top-k and threshold picks, one-line option errors, and selection through the real driver moving toward
the prompts the posterior predicts at the target."""
import numpy as np
import pytest

from rollwise.control.base import build_planner
from rollwise.control.mopps import MoPPS, beta_update, in_band, nearest
from rollwise.core import registry
from rollwise.core.types import Batch, Group

from fakes import R, make_ctx, make_sampled_ctx, run_step


def group(ctx, pid, outcomes):
    return Group(ctx.pool[pid], [R(pid, c) for c in outcomes])


def test_registered_with_its_code_provenance():
    import rollwise.control.mopps as mod

    e = registry.get("planner", "mopps")
    assert e.obj is MoPPS and e.provenance == "CODE" and "arXiv 2507.04632" in mod.__doc__


def test_beta_update_by_hand():
    """Prior Beta(1, 1), decay 0.5. Step 1, 3 right of 4: alpha = .5*1 + .5*1 + 3 = 4, beta = .5 + .5 + 1 = 2.
    Step 2, 0 right of 4: alpha = .5*4 + .5 + 0 = 2.5, beta = .5*2 + .5 + 4 = 5.5."""
    a, b = beta_update(1.0, 1.0, 3, 4, 0.5, 1.0, 1.0)
    assert (a, b) == (4.0, 2.0)
    a, b = beta_update(a, b, 0, 4, 0.5, 1.0, 1.0)
    assert (a, b) == (2.5, 5.5)
    # decay 1: no forgetting, the cumulative posterior (frontier's): Beta(1 + 3 + 0, 1 + 1 + 4)
    a, b = beta_update(*beta_update(1.0, 1.0, 3, 4, 1.0, 1.0, 1.0), 0, 4, 1.0, 1.0, 1.0)
    assert (a, b) == (4.0, 6.0)


def test_observe_updates_only_the_prompts_rolled_out():
    ctx = make_ctx(pool_size=5, n=4)
    m = MoPPS(decay=0.5)
    m.bind(5)
    groups = [group(ctx, 1, [1, 1, 1, 0]), group(ctx, 3, [0, 0, 0, 0])]
    m.observe(groups, Batch(groups, 0), ctx)
    assert m.alpha.tolist() == [1.0, 4.0, 1.0, 1.0, 1.0]
    assert m.beta.tolist() == [1.0, 2.0, 1.0, 5.0, 1.0]
    m.observe(groups[:1], Batch(groups[:1], 1), ctx)  # prompt 3 is not seen again: no decay for it
    assert m.alpha[[1, 3]].tolist() == [0.5 * 4 + 0.5 + 3, 1.0] and m.beta[[1, 3]].tolist() == [0.5 * 2 + 0.5 + 1, 5.0]
    assert ctx.metrics["mopps/predicted_rate"] == pytest.approx(5.5 / (5.5 + 2.5))  # alpha 5.5, beta 2.5


def test_thompson_draw_is_one_beta_sample_per_candidate_from_the_planner_stream():
    """The picks are the candidates whose draw from ctx.rng is nearest the target, and nothing else is drawn
    (the stream after select is where one Beta draw over the candidates leaves it)."""
    ctx = make_ctx(pool_size=6, seed=7)
    m = MoPPS(target=0.5)
    m.bind(6)
    m.alpha[:] = [2.0, 9.0, 1.0, 5.0, 3.0, 1.0]
    m.beta[:] = [2.0, 1.0, 9.0, 5.0, 7.0, 1.0]
    twin = np.random.default_rng(7)
    draws = twin.beta(m.alpha, m.beta)
    expect = sorted(range(6), key=lambda i: (draws[i] - 0.5) ** 2)[:3]
    chosen = [p.id for p in m.select(list(ctx.pool), 3, ctx)]
    assert chosen == expect
    assert ctx.rng.random() == twin.random()  # the same stream position: exactly one draw per candidate
    assert ctx.metrics["mopps/sampled_rate"] == pytest.approx(draws[expect].mean())


def test_concentrated_posteriors_pick_by_distance_to_the_target():
    ctx = make_ctx(pool_size=4, seed=0)
    m = MoPPS()
    m.bind(4)
    # rates ~0.5, ~0.99, ~0.01, ~0.3, each posterior worth a thousand rollouts
    m.alpha[:], m.beta[:] = [500, 990, 10, 300], [500, 10, 990, 700]
    assert [p.id for p in m.select(list(ctx.pool), 2, ctx)] == [0, 3]
    m2 = MoPPS(target=0.95)
    m2.bind(4)
    m2.alpha[:], m2.beta[:] = m.alpha, m.beta
    assert [p.id for p in m2.select(list(ctx.pool), 2, ctx)] == [1, 0]


def test_nearest_and_in_band_by_hand():
    s = np.array([0.95, 0.45, 0.1, 0.6, 0.35])
    assert nearest(s, 3, 0.5).tolist() == [1, 3, 4]  # distances .45 .05 .4 .1 .15
    rng = np.random.default_rng(0)
    assert sorted(in_band(s, 2, 0.3, 0.7, rng).tolist()) in ([1, 3], [1, 4], [3, 4])  # two of the three inside
    # four asked, three inside: the three, then the nearest outside (0.1 is .2 below, 0.95 .25 above)
    assert in_band(s, 4, 0.3, 0.7, rng).tolist() == [1, 3, 4, 2]


def test_threshold_draws_at_random_among_the_in_range():
    seen = set()
    for seed in range(20):
        s = np.array([0.5, 0.4, 0.6, 0.05, 0.95])
        seen.add(tuple(sorted(in_band(s, 1, 0.3, 0.7, np.random.default_rng(seed)).tolist())))
    assert seen == {(0,), (1,), (2,)}


@pytest.mark.parametrize("bad, words", [
    ({"target": 1.5}, "target must be in \\[0, 1\\], got 1.5"),
    ({"oversample": 0}, "oversample must be >= 1"),
    ({"strategy": "best"}, "strategy must be one of topk, threshold, got 'best'"),
    ({"prior_beta": 0.0}, "prior_beta must be a finite number > 0"),
    ({"decay": "half"}, "decay must be a number, got 'half'"),
    ({"lower": 0.8, "upper": 0.7}, "lower \\(0.8\\) must be <= upper \\(0.7\\)"),
])
def test_bad_options_are_one_line(bad, words):
    with pytest.raises(ValueError, match="planner_options.mopps: " + words):
        build_planner("mopps", 8, np.random.default_rng(0), {"mopps": bad})


def test_through_the_driver_selection_moves_to_the_middle():
    """40 prompts, a quarter at each rate 0, 1, 0.5, 0.25; B = 4, n = 8. Uniform draws give a zero-variance
    group half the time; once each prompt has been seen, MoPPS (32 candidates per step) picks almost only
    prompts whose posterior sits near 0.5. No extra rollouts: every train round is one request of n per prompt."""
    rates = {i: [0.0, 1.0, 0.5, 0.25][i % 4] for i in range(40)}
    ctx, eng = make_sampled_ctx(rates, B=4, n=8, seed=3)
    planner = build_planner("mopps", 40, ctx.rng)
    late_zero_variance = []
    for step in range(30):
        ctx.step = step
        batch, _, rounds = run_step(planner, ctx, eng, advance_version=True)
        assert len(rounds) == 1 and sorted(rounds[0].values()) == [8] * 4
        if step >= 15:
            late_zero_variance += [g.zero_variance for g in batch.groups]
    assert np.mean(late_zero_variance) < 0.2
    assert ctx.ledger.count_rollouts("pilot") == 0 and ctx.ledger.count_rollouts("train") == 30 * 4 * 8


def test_composes_with_a_downsampler_and_a_staged_sampler():
    rates = {i: [0.0, 1.0, 0.5, 0.25][i % 4] for i in range(40)}
    for spec in ("mopps+pods", "mopps+ar3po", "mopps+dapo"):
        ctx, eng = make_sampled_ctx(rates, B=4, n=8, seed=1)
        planner = build_planner(spec, 40, ctx.rng)
        for step in range(3):
            ctx.step = step
            batch, _, _ = run_step(planner, ctx, eng, advance_version=True)
            assert 0 < len(batch) <= 4, spec
        assert ctx.ledger.count(fate="open") == 0, spec
