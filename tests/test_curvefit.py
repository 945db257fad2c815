"""bench/curvefit.py: ScaleRL's sigmoid of accuracy against compute, fitted per arm with seed-bootstrap
intervals, the reading rule that says "same ceiling, sooner" or "higher ceiling", and the table a plan
report carries."""
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from rollwise.bench import curvefit as cf

ROOT = Path(__file__).resolve().parents[1]
C = np.array([0.0, 2e4, 4e4, 6e4, 8e4, 1e5, 1.4e5, 2e5])  # one run's evaluations (compute units)


def _runs(A, B, C_mid, R0, seeds=1, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(seeds):
        y = cf.sigmoid(C, A, B, C_mid, R0) + rng.normal(0, noise, len(C)) * (C > 0)
        out.append(cf.Points(C.copy(), y))
    return out


def test_sigmoid_is_r0_at_zero_half_the_gain_at_the_midpoint_and_tends_to_a():
    y = cf.sigmoid([0.0, 5e4, 5e9], A=0.7, B=2.0, C_mid=5e4, R0=0.3)
    assert y[0] == 0.3 and y[1] == pytest.approx(0.5) and y[2] == pytest.approx(0.7, abs=1e-6)


@pytest.mark.parametrize("A,B,C_mid,R0", [(0.6, 1.5, 6e4, 0.3), (0.45, 3.0, 1.2e5, 0.37), (0.9, 0.8, 3e4, 0.1)])
def test_a_noiseless_curve_gives_back_its_parameters(A, B, C_mid, R0):
    f = cf.fit(_runs(A, B, C_mid, R0))
    assert not f.failed
    assert (f.A, f.B, f.C_mid, f.R0) == (pytest.approx(A, rel=1e-6), pytest.approx(B, rel=1e-5),
                                          pytest.approx(C_mid, rel=1e-5), R0)
    assert f.rmse < 1e-8


def test_noisy_seeds_give_back_the_parameters_within_the_noise():
    # 8 seeds, accuracy noise s.d. 0.01: over 40 such data sets the fits' s.d. was 0.011 for A, 0.09 for B
    # and 6% for C_mid; each fit within 3 s.d., and their mean on the truth (no bias)
    fits = [cf.fit(_runs(0.6, 1.5, 6e4, 0.3, seeds=8, noise=0.01, seed=s)) for s in range(20)]
    for f in fits:
        assert abs(f.A - 0.6) < 0.035 and abs(np.log(f.C_mid / 6e4)) < 0.18 and abs(f.B - 1.5) < 0.3
        assert 0.006 < f.rmse < 0.014  # the residual is the noise put in, not a misfit
    assert np.mean([f.A for f in fits]) == pytest.approx(0.6, abs=0.008)
    assert np.mean([f.B for f in fits]) == pytest.approx(1.5, abs=0.07)


def test_a_should_stay_within_r0_and_1():
    # a curve still rising steeply at its last evaluation would extrapolate past 1: A is held at 1
    f = cf.fit(_runs(1.4, 1.0, 4e5, 0.2, seeds=1))
    assert not f.failed and f.A == pytest.approx(1.0)


def test_the_bootstrap_interval_covers_the_truth():
    # 10 seeds of a known curve with noise: in 20 independent experiments, the 95% interval of A and of
    # C_mid covers the true value in nearly all (a coverage far below 95% would fail)
    covered_A = covered_C = 0
    for e in range(20):
        runs = _runs(0.6, 1.5, 6e4, 0.3, seeds=10, noise=0.02, seed=100 + e)
        d = cf.arm_figures(runs, np.random.default_rng(e), samples=400)
        covered_A += d["A_ci"]["lo"] <= 0.6 <= d["A_ci"]["hi"]
        covered_C += d["C_mid_ci"]["lo"] <= 6e4 <= d["C_mid_ci"]["hi"]
    assert covered_A >= 16 and covered_C >= 16


def test_paired_figures_tell_a_higher_ceiling_from_the_same_ceiling_sooner():
    # noise s.d. 0.002: "same ceiling" asks ΔA's interval inside ±0.01 (at 0.005 it reached +0.017 here,
    # and the reading was "ceiling not resolved")
    base = _runs(0.6, 1.5, 6e4, 0.3, seeds=8, noise=0.002, seed=1)
    sooner = _runs(0.6, 1.5, 3e4, 0.3, seeds=8, noise=0.002, seed=2)
    higher = _runs(0.7, 1.5, 6e4, 0.3, seeds=8, noise=0.002, seed=3)
    p = cf.paired_figures(base, sooner, np.random.default_rng(0), samples=300)
    assert p["C_mid_ratio"]["ratio"] == pytest.approx(2.0, rel=0.1) and p["C_mid_ratio"]["lo"] > 1
    assert cf.reading(p, budget=2e5) == "same ceiling, sooner"
    p = cf.paired_figures(base, higher, np.random.default_rng(0), samples=300)
    assert p["dA"]["diff"] == pytest.approx(0.1, abs=0.01) and p["dA"]["lo"] > 0
    assert cf.reading(p, budget=2e5) == "higher ceiling"


def _paired(dA, ratio=(1.0, 0.8, 1.2), mids=(5e4, 5e4)):
    return {"failed": "", "C_mid_paired": {"base": mids[0], "arm": mids[1]},
            "dA": {"diff": dA[0], "lo": dA[1], "hi": dA[2], "failed": 0},
            "C_mid_ratio": {"ratio": ratio[0], "lo": ratio[1], "hi": ratio[2], "failed": 0}}


@pytest.mark.parametrize("dA,ratio,mids,want", [
    ((0.05, 0.02, 0.08), (1.0, 0.8, 1.2), (5e4, 5e4), "higher ceiling"),
    ((-0.05, -0.08, -0.02), (1.0, 0.8, 1.2), (5e4, 5e4), "lower ceiling"),
    ((0.0, -0.008, 0.009), (2.0, 1.3, 3.0), (5e4, 2.5e4), "same ceiling, sooner"),
    ((0.0, -0.008, 0.009), (0.5, 0.3, 0.8), (5e4, 1e5), "same ceiling, later"),
    ((0.0, -0.008, 0.009), (1.1, 0.9, 1.4), (5e4, 5e4), "same ceiling, pace not distinguished"),
    # ΔA's interval holds 0 but reaches past ±0.01: not the same ceiling, and the midpoints are not read
    ((0.0, -0.03, 0.02), (2.0, 1.3, 3.0), (5e4, 2.5e4), "ceiling not resolved"),
    ((0.0, -0.01, 0.01), (2.0, 1.3, 3.0), (5e4, 2.5e4), "same ceiling, sooner"),  # the margin's edge is inside
    # a midpoint past the budget (1e5 here): the ceiling is the sigmoid's guess beyond the runs
    ((0.05, 0.02, 0.08), (0.5, 0.3, 0.8), (5e4, 2e5), "higher ceiling (extrapolated)"),
])
def test_the_reading_rule(dA, ratio, mids, want):
    assert cf.reading(_paired(dA, ratio, mids), budget=1e5) == want


def test_the_reading_of_failed_fits_and_undefined_intervals():
    assert cf.reading({"failed": "arm: fit failed: no evaluation at compute 0 to fix R0"}, budget=1e5) == "fit failed"
    p = _paired((0.05, 0.02, 0.08))
    p["dA"].update(lo=None, hi=None, failed=90)
    assert cf.reading(p, budget=1e5) == "not defined (90 resamples failed)"


@pytest.mark.parametrize("runs,why", [
    ([cf.Points(np.array([0.0, 1e4, 2e4]), np.array([0.3, 0.4, 0.5]))], "a run has 2 evaluations past compute 0"),
    # 3 seeds of 2 evaluations each at slightly different computes: 6 distinct points, no shape to read
    ([cf.Points(np.array([0.0, 1e4 + i, 2e4 - i]), np.array([0.3, 0.4, 0.45])) for i in range(3)],
     "a run has 2 evaluations past compute 0; 3 parameters need 3"),
    ([cf.Points(np.array([1e4, 2e4, 3e4, 4e4]), np.array([0.3, 0.4, 0.5, 0.5]))], "no evaluation at compute 0"),
    ([cf.Points(np.array([0.0, 1e4, 2e4, 3e4]), np.array([0.3, np.nan, 0.5, 0.5]))], "non-finite"),
    ([cf.Points(C, np.full(len(C), 0.3) - 0.01 * (C > 0))], "does not rise above R0"),
])
def test_a_fit_that_cannot_be_made_says_why_instead_of_raising(runs, why):
    f = cf.fit(runs)
    assert f.failed.startswith("fit failed: ") and why in f.failed and np.isnan(f.A)
    d = cf.arm_figures(runs, np.random.default_rng(0), samples=50)
    assert d["failed"] == f.failed and "A_ci" not in d


def test_run_points_keep_the_first_evaluation_past_the_budget():
    rows = [{"step": i, "tokens": t, "eval_acc": a} for i, (t, a) in
            enumerate([(0, 0.3), (40, 0.35), (90, 0.4), (130, 0.42), (170, 0.43)])]
    p = cf.run_points(rows, budget=100)
    assert p.c.tolist() == [0, 40, 90, 130] and p.y.tolist() == [0.3, 0.35, 0.4, 0.42]
    assert cf.run_points(rows, budget=500).c.tolist() == [0, 40, 90, 130, 170]


def test_plan_fits_pair_seeds_both_arms_finished_and_the_table_shows_each_arm():
    base = _runs(0.6, 1.5, 6e4, 0.3, seeds=6, noise=0.005, seed=1)
    arm = _runs(0.7, 1.5, 6e4, 0.3, seeds=6, noise=0.005, seed=2)
    arm[5] = None  # seed 5 of the arm did not finish: 5 pairs
    fits = cf.plan_fits({"grpo": base, "x": arm, "empty": [None] * 6}, "grpo", 2e5,
                        {a: np.random.default_rng(0) for a in ("grpo", "x", "empty")}, samples=200)
    assert set(fits["arms"]) == {"grpo", "x"} and fits["arms"]["x"]["seeds_paired"] == 5
    assert fits["arms"]["x"]["reading"] == "higher ceiling"
    text = "\n".join(cf.markdown_lines(fits, "grpo", 2e5))
    assert "| grpo | 6 | 0.300 | 0.60" in text and "| — | — | baseline |" in text
    assert "| x | 5 | 0.300 | 0.70" in text and "| higher ceiling |" in text
    assert cf.markdown_lines({"arms": {}}, "grpo", 1.0) == [] and cf.markdown_lines(None, "grpo", 1.0) == []


def test_a_report_regenerated_from_an_archived_record_shows_the_table(tmp_path):
    """The smallest archived plan record, unpacked into tmp and reported over again: the fits' table is
    there, every arm has a fit, and the figures the record had are unchanged (additions only)."""
    from rollwise.bench.plan import load_plan
    from rollwise.bench.plan_report import write_plan_report

    spec = importlib.util.spec_from_file_location("rw_archive_curvefit", ROOT / "benchmarks" / "archive.py")
    archive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(archive)
    record = ROOT / "benchmarks" / "results" / "bench3_explore27b_remainder"
    out = tmp_path / "rec"
    shutil.copytree(record, out, ignore=shutil.ignore_patterns("arms", "runs.tar.xz"))
    archive.unpack(record, to=out)
    plan, _ = load_plan(out / "plan.yaml")
    summary = write_plan_report(plan, out)
    recorded = json.loads((record / "summary.json").read_text())
    for arm, d in recorded["arms"].items():  # the verdict's figures as recorded
        assert summary["arms"][arm]["primary"] == pytest.approx(d["primary"])
    fits = summary["curve_fits"]
    assert set(fits["arms"]) == set(plan.arms)
    assert all(not d["failed"] and d["R0"] < d["A"] <= 1 for d in fits["arms"].values())
    text = (out / "report.md").read_text()
    assert "Sigmoid fits of the primary metric against compute" in text
    assert "| arm | seeds | R0 | A [95% CI] | C_mid [95% CI] | B [95% CI] | ΔA vs baseline [95% CI] " in text
    for arm in plan.arms:
        if arm != plan.baseline:
            assert f"| {fits['arms'][arm]['reading']} |" in text
    assert json.loads((out / "summary.json").read_text())["curve_fits"]["arms"].keys() == fits["arms"].keys()
    assert "![sigmoid fits](plan_fits.png)" in text and (out / "plan_fits.png").stat().st_size > 0


def test_an_interval_with_too_many_failed_resamples_is_not_defined_and_the_table_says_so():
    v = np.array([0.5, 0.6, np.nan])
    assert cf._interval(v, failed=50, n=2000) == {"lo": 0.5, "hi": 0.6, "failed": 50}  # 2.5%: still defined
    assert cf._interval(v, failed=51, n=2000) == {"lo": None, "hi": None, "failed": 51}
    d = {"A": 0.5, "A_ci": {"lo": None, "hi": None, "failed": 51}}
    assert cf._ci(d, "A", ".3f") == "0.500 [not defined: 51 resamples failed]"
    # an arm whose runs evaluated twice: its row states the failure instead of numbers
    base = _runs(0.6, 1.5, 6e4, 0.3, seeds=3)
    short = [cf.Points(r.c[:3], r.y[:3]) for r in base]
    fits = cf.plan_fits({"grpo": base, "short": short}, "grpo", 2e5,
                        {a: np.random.default_rng(0) for a in ("grpo", "short")}, samples=50)
    assert fits["arms"]["short"]["reading"] == "fit failed"
    assert not cf.plot({"curve_fits": {"arms": {"short": fits["arms"]["short"]}}}, None)  # nothing to draw
    row = [x for x in cf.markdown_lines(fits, "grpo", 2e5) if x.startswith("| short |")]
    assert row == ["| short | 3 | 0.300 | — | — | — | — | — | fit failed: a run has 2 evaluations past compute 0; "
                   "3 parameters need 3 |"]
