"""Reports that cannot mislead on small or failing runs (issue 48, item 3): the task and its options in every
header, the held-out prompt count the runs used, "not defined" where GRPO ended below its base (it read
"inf [inf, inf]"), GRPO's own row 1.00 by definition, no verdict words where the seeds allow none, and captions
that name only the colours the plots drew."""
import json

import numpy as np
import pytest

from rollwise.bench import plan as planmod
from rollwise.bench import plan_report
from rollwise.bench.report import colour_words, write_report
from rollwise.bench.runner import BenchConfig, run_dir

from test_bench import write_runs
from test_bench_plan import PLAN


def _outcomes(cfg, prompts: int) -> None:
    for p in cfg.planners:
        for s in range(cfg.seed_start, cfg.seed_start + cfg.seeds):
            bits = np.packbits(np.zeros(prompts, np.uint8)).tobytes().hex()
            (run_dir(cfg, "default", p, s) / "eval_outcomes.jsonl").write_text(
                json.dumps({"step": 0, "prompts": prompts, "greedy": bits}) + "\n")


def test_a_failing_quick_bench_says_not_defined_names_its_task_and_counts_its_prompts(tmp_path):
    """GRPO falls from its base 0.5 to 0.4 (smoothed: 0.45): the target is reached at 0 tokens by every curve."""
    cfg = BenchConfig(out=str(tmp_path), planners=["uniform", "fast"], seeds=2, budget_tokens=300, eval_size=1000,
                      extra={"task_options.dataset": "gcd"})
    write_runs(cfg, {"uniform": ([0.5, 0.45, 0.4, 0.4], 100), "fast": ([0.5, 0.4, 0.4, 0.4], 100)})
    _outcomes(cfg, 101)  # the task had 101 held-out prompts, not the 1000 asked
    write_report(cfg, "rollwise bench --test")
    report = (tmp_path / "report.md").read_text()
    assert "Task `arithmetic` (dataset: gcd)." in report
    assert "held-out 101 prompts (standard error of one accuracy ≈ 0.050 at most)" in report
    assert "1000 prompts" not in report and "inf" not in report
    assert "| not defined: GRPO ended below its base |" in report  # fast's row
    assert "| 1.00 (by definition) | by definition (" in report  # GRPO's own row
    # two seeds: no verdict words, and the captions say blue means exactly that
    assert "no difference shown" not in report.split("## Mix")[1]
    assert "every planner in blue: no verdict, 2 seeds decide nothing" in report
    assert "green" not in report.split("## Mix")[1]


def test_captions_name_the_colours_drawn():
    assert colour_words(["higher", "no difference shown"], 8) == (
        "green: its mean accuracy over the budget is above GRPO's (the interval excludes 0); blue: no difference shown")
    assert colour_words(["lower"], 8, "its interval") == "red: its interval is below GRPO's (the interval excludes 0)"
    assert colour_words(["too few seeds"], 1) == "every planner in blue: no verdict, 1 seed decides nothing"


def test_a_plan_with_too_few_seeds_for_its_family_says_no_verdict_and_names_its_task(tmp_path):
    """Family of 2 at alpha 0.05 needs 7 seeds (2 / 2^k <= 0.025); the plan has 6: every verdict is 'none'."""
    text = PLAN.replace("data_seed: 0\n", "data_seed: 0\ntask_options: {pool_size: 300}\n")
    p = planmod.parse_plan(text)
    out = tmp_path / "out"
    planmod.run_plan(p, text.encode(), tmp_path / "plan.yaml", out, log=lambda m: None)
    s = plan_report.summarize_plan(p, out, power_sims=20)
    assert {a: d["verdict"] for a, d in s["arms"].items()} == {
        "grpo-aa": "none: 6 seeds decide nothing", "greso": "none: 6 seeds decide nothing"}
    page = plan_report.markdown(s)
    assert "- Task `arithmetic` (pool_size: 300), " in page
    assert "up to 200 held-out prompts per evaluation (asked; the runs predate" in page  # the simulator writes none
    assert "no difference shown" not in page


def test_compute_to_target_is_not_defined_where_the_baseline_ended_below_its_base():
    g = {"tokens_base": 0.0, "tokens_planner": 0.0, "ratio": float("inf"), "lo": float("inf"), "hi": float("inf"),
         "target": 0.010}
    assert plan_report._ratio(g, {"base_acc": 0.015}) == "not defined: the baseline ended below its base"
    assert plan_report._ratio({**g, "target": 0.015}, {"base_acc": 0.015}) == \
        "not defined: the baseline ended at its base"
    reached = {"tokens_base": 200.0, "tokens_planner": 100.0, "ratio": 2.0, "lo": 1.5, "hi": 3.0, "target": 0.6}
    assert plan_report._ratio(reached) == "2.00 [1.50, 3.00]"


def test_the_plan_report_counts_the_prompts_its_runs_evaluated():
    runs = {"a": [{"outcomes": {0: {"greedy": np.zeros(101)}, 5: {"greedy": np.ones(101)}}}, None],
            "b": [{"outcomes": None}]}
    assert plan_report.heldout_counts(runs) == [101]
    assert plan_report._prompts({"prompts": [101]}) == "101 held-out prompts per evaluation (counted from the runs)"


@pytest.mark.parametrize("decide_on, p_holm, two_way, expected", [
    ("seeds", 0.01, {"diff": 0.02, "lo": -0.001, "hi": 0.04}, "higher"),  # Bench 3.0: the sign-flip test alone
    ("two-way", 0.01, {"diff": 0.02, "lo": -0.001, "hi": 0.04}, "no difference shown"),  # prompts disagree
    ("two-way", 0.01, {"diff": 0.02, "lo": 0.005, "hi": 0.04}, "higher"),
    ("two-way", 0.01, {"diff": -0.02, "lo": -0.04, "hi": -0.005}, "lower"),
    ("two-way", 0.20, {"diff": 0.02, "lo": 0.005, "hi": 0.04}, "no difference shown"),  # Holm still decides too
    ("two-way", 0.01, None, "none: the plan decides on the two-way interval, and these runs have no per-prompt outcomes"),
])
def test_a_plan_can_decide_on_the_two_way_interval(decide_on, p_holm, two_way, expected):
    """issue 47 item 2: `decision.interval: two-way` makes the interval over prompts and seeds decide beside Holm."""
    text = PLAN.replace("decision: {alpha: 0.05", f"decision: {{interval: {decide_on}, alpha: 0.05")
    plan = planmod.parse_plan(text)
    assert plan.decide_on == decide_on
    diff = two_way["diff"] if two_way else 0.02
    d = {"seeds_paired": 8, "primary": {"diff": diff}, "primary_two_way": two_way}
    assert plan_report.verdict(d, p_holm, plan, fewest=7) == expected
    assert plan_report.verdict({**d, "seeds_paired": 6}, p_holm, plan, fewest=7) == "none: 6 seeds decide nothing"


def test_the_decision_interval_is_one_of_two_words():
    with pytest.raises(planmod.PlanError, match=r"decision.interval must be one of seeds, two-way, got 'prompts'"):
        planmod.parse_plan(PLAN.replace("decision: {alpha: 0.05", "decision: {interval: prompts, alpha: 0.05"))


def test_a_plan_reports_compute_ratios_in_words_not_inf():
    """The newcomer's plan (docs/tasks.md) read "not reached [0.00, inf]" and "inf / 0.00" in its table and
    "0.00 / 0.00" under every cost ratio, unexplained: 0 is an arm that never reached the target, inf (0/0
    at the point) a target at or below the base."""
    assert plan_report._x(0.0) == "not reached" and plan_report._x(float("inf")) == "∞"
    assert plan_report._x(1.234) == "1.23"
    shifted_below_base = {"ratio": float("inf"), "lo": 0.0, "hi": float("inf"), "target": 0.0, "tokens_base": 0.0,
                          "tokens_planner": 0.0}
    assert plan_report._shifted(shifted_below_base) == "not defined"
    assert plan_report._shifted({"ratio": 0.0, "tokens_base": 500.0, "tokens_planner": float("inf")}) == "not reached"
    assert plan_report._shifted({"ratio": 2.0}) == "2.00"  # a summary written before the crossings were kept
