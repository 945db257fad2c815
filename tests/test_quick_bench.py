"""`rollwise bench --quick` is the project's protocol in miniature (issue 44 item 7): a shipped exploratory
plan with tuned GRPO as its baseline, a compute budget, both evaluation figures and two seeds that decide
nothing; flags the plan sets are refused with one line."""
import pytest

from rollwise.bench import plan as planmod
from rollwise.bench.cli import QUICK_PLAN
from rollwise.cli import main


def test_the_quick_plan_is_bench3_form_with_tuned_grpo():
    p, _ = planmod.load_plan(QUICK_PLAN)
    assert p.kind == "exploratory" and p.split == "validation" and p.task == "arithmetic"
    # tuned GRPO on task 1 as Bench 3.0 tuned it (docs/bench3.md): n 4, lr 3e-5, 32 prompts per step
    assert p.arms[p.baseline].planner == "uniform"
    assert p.arms[p.baseline].settings == {"n": 4, "learner.lr": 3.0e-5, "batch_size": 32}
    assert p.budget_compute > 0 and p.profile == "gpu-h100-v1"
    assert p.eval_samples >= 1 and p.primary == "greedy"  # both evaluation figures
    # every other arm keeps the baseline's tuned settings (WAVE3) and adds only its own
    for name, arm in p.arms.items():
        assert {k: arm.settings[k] for k in ("n", "learner.lr", "batch_size")} == p.arms[p.baseline].settings
    assert len(p.seeds) < planmod_min_seeds(p)  # it cannot decide: the report says so


def planmod_min_seeds(p):
    from rollwise.bench import stats

    return stats.min_seeds_for_family(len(p.family), p.alpha)


def test_quick_dry_run_builds_the_task_and_prints_the_cost(tmp_path, capsys):
    assert main(["bench", "--quick", "--dry-run", "--out", str(tmp_path / "q")]) == 0
    out = capsys.readouterr().out
    assert "plan quick (exploratory), 3 arms x 2 seeds" in out and "can decide nothing" in out
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("flag", [["--seeds", "3"], ["--planners", "dapo"], ["--budget", "1000"],
                                  ["--plan", "x.yaml"]])
def test_quick_refuses_what_its_plan_sets(tmp_path, capsys, flag):
    assert main(["bench", "--quick", *flag, "--out", str(tmp_path / "q")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "quick" in err and "Traceback" not in err
