"""benchmarks/zero_var_saving.py (issue 43 item 5): the initial share and the tuned pick, on hand-built cases,
and the recorded figures it reads equal the record's own report."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from zero_var_saving import SOURCES, grpo_arms, initial_share, pick  # noqa: E402

from rollwise.bench.plan import load_plan  # noqa: E402


def _run(shares):
    rows = [{"step": 0, "eval_acc": 0.5}] + [{"step": i + 1, "zero_var_frac_gen": z} for i, z in enumerate(shares)]
    return {"rows": rows}


def test_initial_share_is_the_mean_of_each_runs_first_three_steps_then_over_runs():
    runs = [_run([0.5, 0.7, 0.9, 0.0]), _run([0.2, 0.2, 0.2]), None]  # step 4 is not read; an unfinished run is skipped
    assert initial_share(runs) == pytest.approx((0.7 + 0.2) / 2)
    assert initial_share(runs, steps=1) == pytest.approx((0.5 + 0.2) / 2)


def test_the_pick_is_the_grpo_arm_with_the_best_mean_and_only_grpo_arms_compete():
    plan, _ = load_plan(ROOT / "benchmarks/plans/pool_hard_explore.yaml")
    assert grpo_arms(plan) == ["grpo", "grpo-lr3e-5", "grpo-lr3e-4", "grpo-n2", "grpo-n8"]  # not rl-zvp (uniform, other advantage)
    arms = {a: {"mean_auc": 0.60, "mean_auc_base": 0.70} for a in plan.arms if a != "grpo"}
    assert pick({"arms": arms}, plan) == "grpo"
    arms["grpo-n2"]["mean_auc"] = 0.71
    arms["ar3po"]["mean_auc"] = 0.99  # a candidate never becomes the baseline
    assert pick({"arms": arms}, plan) == "grpo-n2"


def test_every_source_names_arms_its_plan_has():
    for src in SOURCES:
        plan_file = ROOT / "benchmarks/results" / src.record / "plan.yaml"
        if not plan_file.exists():  # a source whose plan has not run yet
            plan_file = next((ROOT / "benchmarks/plans").glob(f"{src.record}.yaml"), None)
        if plan_file is None:
            continue
        plan, _ = load_plan(plan_file)
        assert set(src.arms) <= set(plan.arms), src


def test_a_recorded_source_reads_the_records_own_figures():
    out = ROOT / "benchmarks/results/zero_var_saving.json"
    if not out.exists():
        pytest.skip("benchmarks/results/zero_var_saving.json not written yet")
    for fig in json.loads(out.read_text())["sources"]:
        summary = json.loads((ROOT / "benchmarks/results" / fig["record"] / "summary.json").read_text())
        for arm, d in fig["arms"].items():
            rec = summary["arms"][arm]
            assert d["primary"]["diff"] == pytest.approx(rec["primary"]["diff"], abs=1e-12)
            if "symmetric" in rec:  # older records' summaries predate the symmetric figure
                assert d["compute_to_target"]["ratio"] == pytest.approx(rec["symmetric"]["ratio"], nan_ok=True)


def test_the_confirmatory_plan_gets_its_own_table_and_exploration_never_reads_as_it():
    from zero_var_saving import markdown
    g = {"ratio": 1.5, "lo": 1.1, "hi": 2.0, "defined": True}
    arm = {"primary": {"diff": 0.01, "lo": 0.0, "hi": 0.02}, "compute_to_target": g, "gpu_hours_to_target": g}
    fig = {"task": "easy pool", "p0": 0.25, "baseline": "grpo", "grpo_arms": {}, "arms": {"ar3po": arm}}
    md = markdown([{**fig, "record": "pool_easy_explore", "confirmatory": False},
                   {**fig, "record": "suite_confirm_easy", "confirmatory": True}], "cmd")
    explore, confirm = md.split("## The suite's confirmatory plan")
    assert "pool_easy_explore |" in explore and "suite_confirm_easy |" not in explore
    assert "suite_confirm_easy |" in confirm and "pool_easy_explore |" not in confirm.split("Tuned GRPO")[0]
    assert "confirmatory plan" not in markdown([{**fig, "record": "pool_easy_explore", "confirmatory": False}], "cmd")
