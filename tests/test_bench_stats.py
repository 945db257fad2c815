"""bench/stats.py on small curves whose figures are computed by hand in the comments."""
import numpy as np
import pytest

from rollwise.bench import stats


def run(points, extra_steps=()):
    """Metrics rows of a run with evals at (tokens, acc) points; step numbers in token order."""
    rows = [{"step": i, "tokens": t, "eval_acc": a} for i, (t, a) in enumerate(points)]
    return rows + [{"step": 100 + i, "tokens": t} for i, t in enumerate(extra_steps)]  # steps without eval


CURVE = run([(0, 0.4), (100, 0.6), (300, 0.5)], extra_steps=[50, 150])


def test_eval_curve_uses_eval_rows_in_token_order_and_keeps_the_last_of_equal_tokens():
    rows = [{"step": 2, "tokens": 100, "eval_acc": 0.5}, {"step": 0, "tokens": 0, "eval_acc": 0.4},
            {"step": 1, "tokens": 50}, {"step": 3, "tokens": 100, "eval_acc": 0.7}]  # stalled: 0 tokens spent
    t, a = stats.eval_curve(rows)
    assert t.tolist() == [0, 100] and a.tolist() == [0.4, 0.7]
    with pytest.raises(ValueError, match="step-0 evaluation"):
        stats.eval_curve([{"step": 5, "tokens": 100, "eval_acc": 0.5}])


def test_acc_at_interpolates_in_tokens_and_holds_past_the_last_eval():
    assert stats.acc_at(CURVE, 50) == pytest.approx(0.5)  # halfway from 0.4 to 0.6
    assert stats.acc_at(CURVE, 200) == pytest.approx(0.55)  # halfway from 0.6 to 0.5
    assert stats.acc_at(CURVE, 400) == pytest.approx(0.5)  # held
    assert stats.covers_budget(CURVE, 300) and not stats.covers_budget(CURVE, 301)
    # 25/50/75/100% of a 400-token budget: 100, 200, 300, 400 tokens
    assert stats.acc_at_fractions(CURVE, 400) == pytest.approx([0.6, 0.55, 0.5, 0.5])


def test_auc_is_the_mean_of_the_piecewise_linear_curve_over_the_budget():
    # trapezoids: 0-100: (0.4+0.6)/2*100 = 50; 100-300: (0.6+0.5)/2*200 = 110
    assert stats.auc(CURVE, 300) == pytest.approx(160 / 300)
    # budget 200 cuts the second segment at 0.55: 50 + (0.6+0.55)/2*100 = 107.5
    assert stats.auc(CURVE, 200) == pytest.approx(107.5 / 200)
    # budget 400 past the last eval: 0.5 held for 100 more tokens -> 160 + 50
    assert stats.auc(CURVE, 400) == pytest.approx(210 / 400)
    # a run that overshoots the budget gets no credit for tokens past it
    assert stats.auc(run([(0, 0.4), (100, 0.6), (300, 1.0)]), 100) == pytest.approx(0.5)


def test_smooth_curve_is_a_running_mean_of_points_in_tokens_and_accuracy():
    rows = run([(0, 0.4), (100, 0.5), (200, 0.9), (300, 0.6)])
    t, a = stats.smooth_curve(rows, k=3)
    # windows {0}, {0,1}, {0,1,2}, {1,2,3}
    assert t == pytest.approx([0, 50, 100, 200])
    assert a == pytest.approx([0.4, 0.45, 0.6, 2.0 / 3])
    t, a = stats.smooth_curve(rows, k=2)
    assert t == pytest.approx([0, 50, 150, 250]) and a == pytest.approx([0.4, 0.45, 0.7, 0.75])
    # a straight line stays on itself whatever the spacing of the evals: the mean sits at its centroid
    line = run([(0, 0.4), (100, 0.41), (400, 0.44), (500, 0.45), (1100, 0.51)])
    t, a = stats.smooth_curve(line)
    assert a == pytest.approx(0.4 + t / 10_000)


def test_first_crossing_interpolates_within_the_crossing_segment():
    t = np.array([0.0, 100, 200])
    assert stats.first_crossing(t, np.array([0.4, 0.5, 0.7]), 0.6) == pytest.approx(150)
    assert stats.first_crossing(t, np.array([0.4, 0.5, 0.7]), 0.4) == 0  # at the start already
    assert stats.first_crossing(t, np.array([0.4, 0.5, 0.7]), 0.8) == np.inf
    assert stats.first_crossing(t, np.array([0.4, 0.7, 0.5]), 0.6) == pytest.approx(200 / 3)  # the first one
    # one curve per row, one target per row
    v = np.array([[0.4, 0.5, 0.7], [0.4, 0.8, 0.8], [0.4, 0.4, 0.4]])  # 0.4 -> 0.8: 0.6 halfway, at 50
    assert stats.first_crossing(t, v, [0.6, 0.6, 0.5]).tolist() == pytest.approx([150, 50, np.inf])


def test_tokens_to_target_reads_the_smoothed_curve_within_the_budget():
    rows = run([(0, 0.4), (100, 0.5), (200, 0.9), (300, 0.6)])
    # smoothed (k=3): (100, 0.6) -> (200, 2/3); 0.65 is 3/4 of that rise -> 175 tokens
    assert stats.tokens_to_target(rows, 0.65, budget=300) == pytest.approx(175)
    # within a 150-token budget the smoothed curve only gets to 0.6 + 0.5 * (2/3 - 0.6)
    assert stats.tokens_to_target(rows, 0.65, budget=150) == np.inf
    # the raw curve's spike at 200 tokens (0.9) alone does not count as reaching 0.7
    assert stats.tokens_to_target(rows, 0.7, budget=300) == np.inf


def test_percentile_interval_takes_sample_values_so_inf_stays_inf():
    s = np.array([0.0] + [1.0] * 98 + [np.inf])
    # 100 sorted samples: the 2.5th percentile is at position 2.475 -> lower: 1.0; 97.5th at 96.525 -> higher: 1.0
    assert stats.percentile_interval(s) == (1.0, 1.0)
    s = np.array([0.0] * 3 + [1.0] * 94 + [np.inf] * 3)
    assert stats.percentile_interval(s) == (0.0, np.inf)


def test_paired_difference_resamples_seeds_jointly():
    # every seed differs by exactly 0.1: any resample of seeds gives 0.1
    d = stats.paired_difference([0.5, 0.4, 0.6], [0.6, 0.5, 0.7], np.random.default_rng(0))
    assert d["diff"] == pytest.approx(0.1) and d["lo"] == pytest.approx(0.1) and d["hi"] == pytest.approx(0.1)
    # unpaired, the same values would give a wide interval: pairing removes the seed-to-seed spread
    # differences [0, 0, 0, 0, 1]: a resample's mean is (times seed 4 is drawn) / 5, Binomial(5, 0.2):
    # P(0) = 0.33 > 2.5% -> lo = 0; P(>= 3) = 5.8%, P(>= 4) = 0.7% -> hi = 3/5
    d = stats.paired_difference([0.0] * 5, [0, 0, 0, 0, 1.0], np.random.default_rng(1))
    assert d["diff"] == pytest.approx(0.2) and d["lo"] == 0.0 and d["hi"] == pytest.approx(0.6)
    # a fixed generator seed gives the same interval
    a = stats.paired_difference([0.5, 0.4, 0.6], [0.7, 0.4, 0.5], np.random.default_rng(7))
    b = stats.paired_difference([0.5, 0.4, 0.6], [0.7, 0.4, 0.5], np.random.default_rng(7))
    assert a == b
    with pytest.raises(ValueError):
        stats.paired_difference([], [], np.random.default_rng(0))


def test_ratio_is_zero_when_the_planner_never_reaches_and_inf_only_when_grpo_alone_does_not():
    tb = np.array([100, np.inf, 100, np.inf])
    tp = np.array([50, 50, np.inf, np.inf])
    assert stats._ratio(tb, tp).tolist() == [2.0, np.inf, 0.0, 0.0]


LINEAR = run([(0, 0.4), (100, 0.5), (200, 0.6)])
HIGH = run([(0, 0.4), (100, 0.5), (200, 0.8)])
FAST = run([(0, 0.4), (100, 0.6), (200, 0.6)])


def test_tokens_to_target_ratio_when_every_resample_agrees():
    # k=1: no smoothing. GRPO ends at 0.6 on both seeds -> target 0.6, reached at 200 tokens; the
    # planner gets to 0.6 at 100 tokens on both seeds -> ratio 2 in every resample
    r = stats.tokens_to_target_ratio([LINEAR, LINEAR], [FAST, FAST], 200, np.random.default_rng(0), k=1)
    assert r["ratio"] == pytest.approx(2.0) and r["lo"] == pytest.approx(2.0) and r["hi"] == pytest.approx(2.0)
    assert r["target"] == pytest.approx(0.6) and (r["target_lo"], r["target_hi"]) == pytest.approx((0.6, 0.6))
    assert r["tokens_base"] == pytest.approx(200) and r["tokens_planner"] == pytest.approx(100)
    assert r["reach_frac_base"] == 1.0 and r["reach_frac_planner"] == 1.0


def test_tokens_to_target_ratio_recomputes_the_target_in_every_resample():
    # GRPO ends at 0.6 (seed 0) and 0.8 (seed 1): the target is 0.7 and the planner (0.6 on both seeds)
    # misses it. Resamples: {0,0} target 0.6 -> planner at 100 vs GRPO at 200: ratio 2 (prob 1/4);
    # {1,1} target 0.8 and {0,1} target 0.7 -> the planner never reaches: ratio 0 (prob 3/4)
    r = stats.tokens_to_target_ratio([LINEAR, HIGH], [FAST, FAST], 200, np.random.default_rng(0), k=1)
    assert r["ratio"] == 0.0 and r["tokens_planner"] == np.inf and r["target"] == pytest.approx(0.7)
    assert (r["lo"], r["hi"]) == pytest.approx((0.0, 2.0))
    assert (r["target_lo"], r["target_hi"]) == pytest.approx((0.6, 0.8))
    assert 0.2 < r["reach_frac_planner"] < 0.3
    # GRPO's mean curve ends exactly at the mean target: it always reaches, so the ratio is never inf
    assert r["reach_frac_base"] == 1.0
    # deterministic for a fixed generator seed
    assert r == stats.tokens_to_target_ratio([LINEAR, HIGH], [FAST, FAST], 200, np.random.default_rng(0), k=1)


def test_tokens_to_target_ratio_with_a_fixed_target():
    # target 0.55: GRPO's mean curve (0.4, 0.5, 0.7) crosses at 100 + 0.05/0.2*100 = 125; the planner's
    # (0.4, 0.6, 0.6) at 0.15/0.2*100 = 75 -> 125/75
    r = stats.tokens_to_target_ratio([LINEAR, HIGH], [FAST, FAST], 200, np.random.default_rng(0),
                                     target=0.55, k=1)
    assert r["ratio"] == pytest.approx(125 / 75) and r["target_lo"] == r["target_hi"] == 0.55
    # a target GRPO never reaches but the planner does: inf, as it should be
    r = stats.tokens_to_target_ratio([LINEAR], [HIGH], 200, np.random.default_rng(0), target=0.7, k=1)
    assert r["ratio"] == np.inf and r["reach_frac_base"] == 0.0 and r["reach_frac_planner"] == 1.0
    with pytest.raises(ValueError):
        stats.tokens_to_target_ratio([LINEAR], [], 200, np.random.default_rng(0))


def test_verdict_needs_enough_seeds_and_an_interval_that_excludes_the_null():
    assert stats.verdict(0.01, 0.03, 5) == "higher"
    assert stats.verdict(-0.03, -0.01, 5) == "lower"
    assert stats.verdict(-0.01, 0.02, 5) == "no difference shown"
    assert stats.verdict(0.01, 0.03, 2) == "too few seeds"  # however decisive it looks
    assert stats.verdict(1.2, 1.9, 5, null=1.0) == "higher"


# ---------------------------------------------------------------------------------------------------
# Bench 3.0: sign-flip test, Holm, power, compute-to-target


def test_sign_flip_p_is_exact_on_small_hand_enumerated_cases():
    # k = 3, all positive: only the observed pattern and its mirror are as extreme -> 2/8
    assert stats.sign_flip_p([0.01, 0.02, 0.03]) == pytest.approx(0.25)
    assert stats.sign_flip_p([5.0, 1.0, 1.0]) == pytest.approx(0.25)  # the size does not matter
    # d = [1, 2, -1], sum 2; the 8 signed sums are 2, 4, -2, 0, 0, 2, -4, -2 -> |s| >= 2 in 6 of 8
    assert stats.sign_flip_p([1.0, 2.0, -1.0]) == pytest.approx(0.75)
    assert stats.sign_flip_p([1.0, -1.0]) == 1.0  # mean 0: every pattern is as extreme
    # the floor: k seeds all one way give 2 / 2^k, here 2/64
    assert stats.sign_flip_p(-np.arange(1, 7) / 100) == pytest.approx(2 / 64)
    with pytest.raises(ValueError, match="at least one"):
        stats.sign_flip_p([])


def test_sign_flip_p_above_16_seeds_is_monte_carlo_close_to_the_exact_value():
    d = np.random.default_rng(3).normal(0.3, 1.0, size=17)
    exact = float(np.mean(np.abs(stats.sign_patterns(17) @ d) >= abs(d.sum()) - 1e-12))
    mc = stats.sign_flip_p(d, np.random.default_rng(0), samples=40_000)
    assert abs(mc - exact) < 0.01 and 0.01 < exact < 0.99
    assert mc == stats.sign_flip_p(d, np.random.default_rng(0), samples=40_000)  # seeded
    with pytest.raises(ValueError, match="generator"):
        stats.sign_flip_p(d)


def test_holm_adjusts_step_down_and_keeps_the_order_of_the_raw_p_values():
    # sorted 0.01, 0.03, 0.04 -> x3, x2, x1 = 0.03, 0.06, 0.04 -> running max 0.03, 0.06, 0.06
    assert stats.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    # 0.01 x 3 = 0.03; 0.04 x 2 = 0.08; 0.5 x 1 = 0.5
    assert stats.holm([0.04, 0.01, 0.5]) == pytest.approx([0.08, 0.03, 0.5])
    assert stats.holm([0.6, 0.5]) == pytest.approx([1.0, 1.0])  # 0.5 x 2 = 1.0 (capped), then max
    assert stats.holm([0.02]) == pytest.approx([0.02])  # a family of one: no correction


def test_min_seeds_for_family_is_where_two_over_two_to_the_k_reaches_alpha_over_m():
    assert stats.min_seeds_for_family(1) == 6  # 2/32 = 0.0625 > 0.05; 2/64 = 0.031 <= 0.05
    assert stats.min_seeds_for_family(3) == 7  # alpha/m = 0.0167: 2/64 = 0.031 no, 2/128 = 0.0156 yes
    assert stats.min_seeds_for_family(15) == 10  # 0.00333: 2/512 = 0.0039 no, 2/1024 = 0.00195 yes
    with pytest.raises(ValueError):
        stats.min_seeds_for_family(0)


def test_power_and_seeds_needed():
    # no spread: every simulated run has all differences positive, p = 2/2^k, passes from the floor on
    assert stats.power(0.01, 0.0, k=10, m=15) == 1.0
    assert stats.power(0.01, 0.0, k=9, m=15) == 0.0  # 2/512 > 0.05/15: no 9-seed run can pass
    assert stats.seeds_needed(0.01, 0.0, m=15) == {"seeds": 10, "min_seeds": 10, "power": {10: 1.0}}
    # no effect: passes at about the level tested, alpha/m = 0.05
    assert stats.power(0.0, 1.0, k=8, sims=2000) < 0.08
    # effect = 1 s.d. of the differences, family of 1: power rises with seeds and reaches 0.8
    r = stats.seeds_needed(1.0, 1.0, m=1, sims=400)
    ks = sorted(r["power"])
    assert r["seeds"] == ks[-1] and r["power"][ks[-1]] >= 0.8 and 6 <= r["seeds"] <= 16
    assert all(r["power"][k] < 0.8 for k in ks[:-1])
    # an effect too small for 16 seeds: no k
    assert stats.seeds_needed(0.1, 1.0, m=15, sims=200)["seeds"] is None


def test_compute_to_target_reads_raw_curves_and_moves_the_target_by_one_standard_error():
    # GRPO ends at 0.6 and 0.8: target 0.7, its s.e. = sd(0.6, 0.8) / sqrt(2) = 0.1414 / 1.414 = 0.1
    arm = run([(0, 0.4), (100, 0.65), (200, 0.65)])
    r = stats.compute_to_target([LINEAR, HIGH], [arm, arm], 200, np.random.default_rng(0), samples=200)
    assert r["target"] == pytest.approx(0.7) and r["target_se"] == pytest.approx(0.1)
    assert r["ratio"] == 0.0  # the arm's raw mean curve (0.4, 0.65, 0.65) never reaches 0.7
    # -1 s.e.: target 0.6; GRPO's mean curve (0.4, 0.5, 0.7) crosses at 150, the arm's at 0.2/0.25*100 = 80
    assert r["sensitivity"]["-1se"]["ratio"] == pytest.approx(150 / 80)
    assert r["sensitivity"]["-1se"]["target"] == pytest.approx(0.6)
    assert r["sensitivity"]["+1se"]["ratio"] == 0.0  # 0.8: out of the arm's reach
    # raw, not smoothed: a spike counts. Smoothed (k=3), this curve never reaches 0.7 (see above)
    spiky = run([(0, 0.4), (100, 0.5), (200, 0.9), (300, 0.6)])
    flat = run([(0, 0.4), (300, 0.7)])
    r = stats.compute_to_target([flat], [spiky], 300, np.random.default_rng(0), samples=50)
    # target 0.7 (GRPO at the budget), GRPO reaches it at 300; the spiky arm at 100 + 0.2/0.4*100 = 150
    assert r["ratio"] == pytest.approx(2.0) and r["target_se"] == 0.0


def test_with_x_puts_runs_on_another_cost_axis():
    rows = stats.with_x(LINEAR, [0, 250, 500])
    assert stats.auc(rows, 500) == pytest.approx(((0.4 + 0.5) / 2 * 250 + (0.5 + 0.6) / 2 * 250) / 500)
    with pytest.raises(ValueError, match="2 values for 3 rows"):
        stats.with_x(LINEAR, [0, 1])
