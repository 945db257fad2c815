"""Bench 4.0's time-to-target is symmetric under the null (issue 47, item 1): hand-computed cases, and the
testbed's recorded A/A comparison read both ways round."""
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from rollwise.bench import stats

RECORD = Path(__file__).parents[1] / "benchmarks/results/bench3_confirm_remainder"


def run(points):
    return [{"step": i, "tokens": t, "eval_acc": a} for i, (t, a) in enumerate(points)]


def test_the_target_is_a_fraction_of_the_pooled_gain_and_swapping_labels_inverts_the_ratio():
    # both start at 0.2; at the budget (10) the baseline reaches 0.6 and the arm 0.8: pooled end 0.7,
    # target 0.2 + 0.8 * 0.5 = 0.6. The baseline crosses it at 10, the arm (linear 0.2 -> 0.8) at 20/3.
    base = [run([(0, 0.2), (10, 0.6)])]
    arm = [run([(0, 0.2), (10, 0.8)])]
    g = stats.symmetric_time_to_target(base, arm, 10, np.random.default_rng(0), samples=20, reference="pooled")
    assert g["target"] == pytest.approx(0.6) and g["cost_arm"] == pytest.approx(20 / 3)
    assert g["ratio"] == pytest.approx(1.5)
    r = stats.symmetric_time_to_target(arm, base, 10, np.random.default_rng(0), samples=20, reference="pooled")
    assert r["target"] == pytest.approx(0.6) and r["ratio"] == pytest.approx(1 / 1.5)


def test_the_default_target_is_a_fraction_of_the_baselines_gain_reached_inside_the_budget():
    # target 0.2 + 0.8 * (0.6 - 0.2) = 0.52: the baseline crosses at 8 (not at the budget), the arm at 0.32 / 0.06
    base = [run([(0, 0.2), (10, 0.6)])]
    arm = [run([(0, 0.2), (10, 0.8)])]
    g = stats.symmetric_time_to_target(base, arm, 10, np.random.default_rng(0), samples=20)
    assert g["target"] == pytest.approx(0.52) and g["cost_base"] == pytest.approx(8.0)
    assert g["ratio"] == pytest.approx(8.0 / (0.32 / 0.06))


def test_no_gain_is_not_defined_in_words_not_inf():
    flat = [run([(0, 0.5), (10, 0.4)])]
    g = stats.symmetric_time_to_target(flat, flat, 10, np.random.default_rng(0), samples=20)
    assert not g["defined"] and np.isnan(g["ratio"])
    assert stats.ratio_text(g).startswith("not defined")


def _unpacked(tmp_path: Path) -> Path:
    if not (RECORD / "runs.tar.xz").exists():
        pytest.skip("the testbed's confirmatory record is not in this checkout")
    out = tmp_path / RECORD.name
    shutil.copytree(RECORD, out)
    with tarfile.open(out / "runs.tar.xz") as tar:
        tar.extractall(out, filter="data")
    return out


def test_the_recorded_aa_arm_reads_about_one_either_way_round(tmp_path):
    from rollwise.bench import costs
    from rollwise.bench.plan import recorded_plan
    from rollwise.bench.plan_report import load_arm, on_compute

    out = _unpacked(tmp_path)
    plan = recorded_plan(out)
    profile = costs.load_profile(plan.profile)
    metric = "eval_acc"
    base = [on_compute(r, metric, profile)[0] for r in load_arm(plan, out, plan.baseline)]
    aa = [on_compute(r, metric, profile)[0] for r in load_arm(plan, out, "grpo-aa")]
    budget = plan.budget_compute
    for reference in ("baseline", "pooled"):
        one = stats.symmetric_time_to_target(base, aa, budget, np.random.default_rng(0), samples=2000, reference=reference)
        two = stats.symmetric_time_to_target(aa, base, budget, np.random.default_rng(0), samples=2000, reference=reference)
        for g in (one, two):
            assert g["defined"] and g["lo"] <= 1 <= g["hi"], (reference, g)
            assert 0.75 < g["ratio"] < 1.33, (reference, g)
    assert one["ratio"] * two["ratio"] == pytest.approx(1.0)  # pooled: the same target, the inverse ratio
    # the old definition is not symmetric: the baseline's own end is its target
    old = stats.compute_to_target(base, aa, budget, np.random.default_rng(0), samples=200)
    old_swapped = stats.compute_to_target(aa, base, budget, np.random.default_rng(0), samples=200)
    assert (old["ratio"], old_swapped["ratio"]) != (pytest.approx(1.0), pytest.approx(1.0))


def test_the_t_interval_for_few_seeds_is_hand_computed():
    # diffs 1, 2, 3: mean 2, s.d. 1, t(0.975, 2) = 4.303: 2 -/+ 4.303 / sqrt(3)
    t = stats.t_interval([1.0, 2.0, 3.0])
    assert t["lo"] == pytest.approx(2 - 4.303 / 3 ** 0.5) and t["hi"] == pytest.approx(2 + 4.303 / 3 ** 0.5)
    assert stats.t_interval([1.0] * 12) is None and stats.t_interval([1.0]) is None


def test_the_t_table_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    for df, q in enumerate(stats.T975, start=1):
        assert q == pytest.approx(scipy_stats.t.ppf(0.975, df), abs=5e-4)
