"""`rollwise bench --plan`: a bad plan is one line naming the problem; a tiny plan runs end to end on the
simulator, resumes, refuses a changed plan, and reports Holm-adjusted verdicts; status and dry run."""
import json
import sys
from pathlib import Path

import pytest
import torch

from rollwise.bench import plan as planmod
from rollwise.bench.environment import describe, environment
from rollwise.bench.runner import run_dir
from rollwise.cli import main

PLAN = """
name: tiny-sim
kind: exploratory
task: arithmetic
engine: sim
data_seed: 0
baseline: grpo
arms:
  grpo: {planner: uniform}
  grpo-aa: {planner: uniform, seed_offset: 100}
  greso: {planner: greso}
seeds: [0, 1, 2, 3, 4, 5]
budget: {compute_units: 4000, profile: gpu-h100-v1, tokens: 6000}
evaluation: {split: validation, size: 200, evaluations: 3, primary: greedy}
family: [grpo-aa, greso]
decision: {alpha: 0.05, goal_ratio: 3}
"""


def write(tmp_path, text, name="plan.yaml"):
    f = tmp_path / name
    f.write_text(text)
    return f


def test_a_good_plan_parses_with_its_arms_seeds_and_family():
    p = planmod.parse_plan(PLAN)
    assert p.baseline == "grpo" and list(p.arms) == ["grpo", "grpo-aa", "greso"]
    assert p.run_seeds("grpo-aa") == [100, 101, 102, 103, 104, 105] and p.run_seeds("grpo") == list(range(6))
    assert p.metric() == "eval_acc" and p.family == ["grpo-aa", "greso"] and p.budget_tokens == 6000
    p = planmod.parse_plan(PLAN.replace("seeds: [0, 1, 2, 3, 4, 5]", "seeds: {start: 1000, count: 3}"))
    assert p.seeds == [1000, 1001, 1002]
    ex = planmod.load_plan(Path(__file__).parent.parent / "benchmarks/plans/example_task1.yaml")[0]
    assert ex.kind == "exploratory" and "grpo-aa" in ex.family


@pytest.mark.parametrize("change, message", [
    (("  greso: {planner: greso}", "  greso: {planner: nope}"), "arms.greso: no planner named 'nope'"),
    (("family: [grpo-aa, greso]", "family: [grpo-aa, dapo]"), "family member 'dapo' is not among the arms"),
    (("family: [grpo-aa, greso]", "family: [grpo, greso]"), "family member 'grpo' is the baseline"),
    (("baseline: grpo\n", ""), "missing field 'baseline'"),
    (("data_seed: 0", "data_seed: zero"), "data_seed must be an integer, got 'zero'"),
    (("kind: exploratory", "kind: final"), "kind must be one of exploratory, confirmatory"),
    (("alpha: 0.05", "alpha: 5"), "decision.alpha must be in (0, 1), got 5"),
    (("profile: gpu-h100-v1", "profile: tpu"), "budget: unknown cost profile 'tpu'"),
    (("primary: greedy", "primary: pass@k"), "primary pass@k needs k >= 1"),
    (("seeds: [0, 1, 2, 3, 4, 5]", "seeds: [0, 0]"), "distinct integers"),
    (("grpo-aa: {planner: uniform, seed_offset: 100}", "grpo-aa: {planner: uniform}"), "would run the same runs"),
    (("  greso: {planner: greso}", "  greso: {planner: 'os:system'}"), "not import paths"),
    (("task: arithmetic", "task: nope"), "task: no task named 'nope'"),
    (("kind: exploratory", "kind: confirmatory"), "cites the validation results"),
    (("name: tiny-sim", "name: tiny-sim\nextra: 1"), "unknown key 'extra'"),
])
def test_a_bad_plan_is_one_line_naming_the_problem(tmp_path, capsys, change, message):
    f = write(tmp_path, PLAN.replace(*change))
    assert PLAN.replace(*change) != PLAN
    assert main(["bench", "--plan", str(f), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and str(f) in err
    assert not (tmp_path / "out").exists()  # nothing recorded, nothing run


def test_data_seed_is_refused_where_the_task_has_no_splits_yet(monkeypatch):
    from dataclasses import dataclass, replace

    from rollwise.core import registry

    @dataclass
    class NoSplits:  # a task with one held-out set (no data_seed option)
        pool_size: int = 10

    real = registry.get
    monkeypatch.setattr(registry, "get", lambda kind, name: type("E", (), {"obj": NoSplits})()
                        if (kind, name) == ("task", "nosplits") else real(kind, name))
    plan = replace(planmod.parse_plan(PLAN), task="nosplits")
    assert planmod.task_options(plan) == {} and "one held-out set" in planmod.data_split_note(plan)
    with pytest.raises(planmod.PlanError, match="has no data splits by data seed yet"):
        planmod.task_options(replace(plan, data_seed=3))


def test_plans_pass_their_data_seed_and_split_to_tasks_that_split():
    p = planmod.parse_plan(PLAN.replace("data_seed: 0", "data_seed: 7"))
    assert p.split == "validation"  # exploratory: validation
    assert planmod.task_options(p) == {"data_seed": 7, "split": "validation"}
    for task in ("chain", "file", "reasoning-gym"):
        assert planmod.task_options(replace_task(p, task)) == {"data_seed": 7, "split": "validation"}
    assert planmod.data_split_note(p) == "data seed 7, validation split"
    confirm = planmod.parse_plan(PLAN.replace("kind: exploratory", "kind: confirmatory\nchosen_from: runs X")
                                 .replace("split: validation, ", "").replace("[0, 1, 2, 3, 4, 5]", "{start: 1000, count: 8}"))
    assert confirm.split == "test" and planmod.task_options(confirm)["split"] == "test"


def replace_task(plan, task):
    from dataclasses import replace

    return replace(plan, task=task)


@pytest.mark.parametrize("change, message", [
    (("split: validation", "split: test"), "a plan of kind exploratory reads the validation split, not test"),
    (("primary: greedy", "primary: sampled"), "primary 'sampled' (the mean accuracy of samples at the training "
                                               "temperature) needs samples >= 1"),
])
def test_plan_evaluation_rules(change, message):
    with pytest.raises(planmod.PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        planmod.parse_plan(PLAN.replace(*change))


def test_the_sampled_primary_figure_reads_the_mean_accuracy_of_samples(tmp_path):
    p = planmod.parse_plan(PLAN.replace("engine: sim\n", "").replace("primary: greedy", "primary: sampled, samples: 8"))
    assert p.metric() == "eval_sampled_acc@8" and p.samples_per_prompt() == 8
    extra = planmod.arm_config(p, "grpo", tmp_path).extra
    assert extra["eval_samples"] == 8 and "eval_k" not in extra
    p = planmod.parse_plan(PLAN.replace("primary: greedy", "primary: pass@k, k: 4, samples: 16"))
    assert p.metric() == "eval_pass@4" and p.samples_per_prompt() == 16


def test_a_tiny_plan_runs_end_to_end_resumes_and_refuses_a_changed_plan(tmp_path, capsys):
    f = write(tmp_path, PLAN)
    out = tmp_path / "out"
    assert main(["bench", "--plan", str(f), "--out", str(out)]) == 0
    # the record: the plan's bytes and hash, before any run
    assert (out / "plan.yaml").read_text() == PLAN
    digest = (out / "plan.sha256").read_text().split()[0]
    assert digest == planmod.sha256(PLAN.encode())
    # the record names the data seed and split: the plan's, and every run's own settings
    record = json.loads((out / "plan_record.json").read_text())
    assert record["task_options"] == {"data_seed": 0, "split": "validation"}
    # and where it ran: the plan at its start, each run where it finished, the report in one line
    here = environment()
    assert record["environment"] == here and here["packages"]["torch"] == torch.__version__
    assert all(json.loads(d.read_text())["environment"] == here for d in out.rglob("done.json"))
    assert f"- Runs made in one environment: {describe(here)}.\n" in (out / "report.md").read_text()
    runs = [json.loads(b.read_text())["settings"]["task_options"] for b in out.rglob("bench.json")]
    assert len(runs) == 18 and all((o["data_seed"], o["split"]) == (0, "validation") for o in runs)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["family_size"] == 2 and summary["kind"] == "exploratory"
    arms = summary["arms"]
    assert set(arms) == {"grpo-aa", "greso"} and arms["greso"]["seeds_paired"] == 6
    # Holm over the two family p-values, recomputed by hand: the smaller x 2, the larger x 1, running max
    p = sorted([arms["grpo-aa"]["p"], arms["greso"]["p"]])
    adj = sorted([arms["grpo-aa"]["p_holm"], arms["greso"]["p_holm"]])
    assert adj == pytest.approx([min(1, 2 * p[0]), max(min(1, 2 * p[0]), p[1])])
    # the paired difference is the mean of the per-seed differences, and the exact p reads them
    d = arms["greso"]["diffs"]
    assert arms["greso"]["primary"]["diff"] == pytest.approx(sum(d) / 6)
    assert arms["greso"]["p"] >= 2 / 2 ** 6
    report = (out / "report.md").read_text()
    assert "EXPLORATORY" in report and "m = 2" in report and "data seed 0" in report
    assert "plan_diffs.png" in report and (out / "plan_diffs.png").exists()
    # every arm's mean curve over the compute budget, its first point the mean of the base evaluations
    assert (out / "plan_curves.png").exists() and set(summary["curves"]) == {"grpo", "grpo-aa", "greso"}
    c = summary["curves"]["grpo"]
    assert c["seeds"] == 6 and c["x"][-1] == 4000 and len(c["mean"]) == len(c["se"]) == 25
    run0 = [json.loads(x) for x in (out / "arms/grpo/runs/default/uniform/seed0/metrics.jsonl").read_text().splitlines()]
    assert c["mean"][0] == pytest.approx(run0[0]["eval_acc"]) and c["se"][0] == pytest.approx(0)  # one base
    assert f"| grpo | 6 | {c['mean'][0]:.3f} ± 0.000 |" in report
    # the ranking: each arm's own mean figure, highest first; greso's is the one its paired row reads
    rank = summary["ranking"]
    assert [r["auc"] for r in rank] == sorted((r["auc"] for r in rank), reverse=True)
    assert next(r for r in rank if r["arm"] == "greso")["auc"] == pytest.approx(arms["greso"]["mean_auc"])
    assert next(r for r in rank if r["arm"] == "grpo")["auc"] == pytest.approx(arms["greso"]["mean_auc_base"])
    # sim rows carry no prompt/learner tokens: the report says what the compute units leave out
    assert summary["missing_counts"] == ["learner_tokens", "prompt_tokens"]
    mtimes = {q: q.stat().st_mtime_ns for q in out.rglob("metrics.jsonl")}
    assert len(mtimes) == 18

    # resume: the same plan reuses every finished run
    capsys.readouterr()
    assert main(["bench", "--plan", str(f), "--out", str(out)]) == 0
    assert {q: q.stat().st_mtime_ns for q in out.rglob("metrics.jsonl")} == mtimes
    # a changed plan on the same --out is refused with one line, and nothing recorded moves
    f.write_text(PLAN.replace("alpha: 0.05", "alpha: 0.1"))
    assert main(["bench", "--plan", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "a changed plan is a new plan" in err and err.count("\n") == 1
    assert (out / "plan.yaml").read_text() == PLAN and (out / "plan.sha256").read_text().split()[0] == digest
    assert {q: q.stat().st_mtime_ns for q in out.rglob("metrics.jsonl")} == mtimes

    # status: every run done
    assert main(["bench", "status", str(out)]) == 0
    status = capsys.readouterr().out
    assert "tiny-sim" in status and "total" in status
    total = [x for x in status.splitlines() if x.startswith("total")][0].split()
    assert total[1:4] == ["18", "18", "0"]


def test_report_only_without_the_runs_refuses_and_rewrites_nothing(tmp_path, capsys):
    """A record whose runs are packed away (benchmarks/archive.py) or not run yet: --report-only would
    overwrite its report with an empty one. It refuses in one line and every recorded file stays."""
    import shutil

    f = write(tmp_path, PLAN.replace("seeds: [0, 1, 2, 3, 4, 5]", "seeds: [0, 1]"))
    out = tmp_path / "out"
    assert main(["bench", "--plan", str(f), "--out", str(out)]) == 0
    kept = {q: q.read_bytes() for q in out.iterdir() if q.is_file()}
    for arm in ("grpo", "grpo-aa", "greso"):
        shutil.rmtree(out / "arms" / arm / "runs")
    capsys.readouterr()
    assert main(["bench", "--plan", str(f), "--out", str(out), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert "holds no finished run yet; nothing was rewritten" in err and err.count("\n") == 1
    (out / "runs.tar.xz").write_bytes(b"packed")
    assert main(["bench", "--plan", str(f), "--out", str(out), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert "are packed in runs.tar.xz; unpack them first (python benchmarks/archive.py unpack out)" in err
    assert {q: q.read_bytes() for q in out.iterdir() if q.is_file() and q.name != "runs.tar.xz"} == kept
    assert main(["bench", "status", str(out)]) == 0  # status says why nothing is counted
    assert "the runs of " in capsys.readouterr().out


def test_dry_run_prints_core_hours_and_runs_nothing(tmp_path, capsys):
    f = write(tmp_path, PLAN.replace("engine: sim\n", ""))  # the tiny model: a CPU-profile estimate
    out = tmp_path / "out"
    assert main(["bench", "--plan", str(f), "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert not out.exists()
    lines = {x.split()[0]: x.split() for x in text.splitlines() if x.split() and x.split()[0] in ("grpo", "total")}
    assert lines["grpo"][1:4] == ["6", "0", "6"] and lines["total"][1:4] == ["18", "0", "18"]
    assert float(lines["total"][-1]) > 0 and "core-hours in all" in text
    assert "needs at least 7 seeds" in text  # 6 seeds, a family of 2


def test_a_confirmatory_plan_must_be_committed_before_its_runs(tmp_path, capsys):
    text = PLAN.replace("kind: exploratory", "kind: confirmatory\nchosen_from: validation runs X").replace(
        "seeds: [0, 1, 2, 3, 4, 5]", "seeds: {start: 1000, count: 7}").replace("split: validation", "split: test")
    f = write(tmp_path, text)
    assert main(["bench", "--plan", str(f), "--out", str(tmp_path / "out")]) == 2
    assert "committed to git" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing written, not even an empty --out


def test_plan_flags_that_the_plan_sets_are_refused(tmp_path, capsys):
    f = write(tmp_path, PLAN)
    assert main(["bench", "--plan", str(f), "--seeds", "3"]) == 2
    assert "drop it" in capsys.readouterr().err
    assert main(["bench", "status"]) == 2
    assert "rollwise bench status DIR" in capsys.readouterr().err


def test_a_confirmatory_plan_with_too_few_seeds_for_its_family_is_refused(tmp_path):
    text = PLAN.replace("kind: exploratory", "kind: confirmatory\nchosen_from: validation runs X").replace(
        "split: validation", "split: test")
    # family of 2 at 0.05: 2/2^k <= 0.025 needs k >= 7; the plan has 6
    with pytest.raises(planmod.PlanError, match="needs 7..16 seeds .* got 6"):
        planmod.parse_plan(text)
    assert planmod.parse_plan(text.replace("seeds: [0, 1, 2, 3, 4, 5]", "seeds: {start: 1000, count: 7}")).seeds[-1] == 1006


def test_a_plan_that_is_not_a_yaml_mapping_is_one_line(tmp_path):
    with pytest.raises(planmod.PlanError, match="not valid YAML"):
        planmod.parse_plan("name: [", "plan p")
    with pytest.raises(planmod.PlanError, match="expected a mapping of plan fields"):
        planmod.parse_plan("- a\n- b\n", "plan p")
    with pytest.raises(planmod.PlanError, match="cannot read it"):
        planmod.load_plan(tmp_path / "missing.yaml")


def test_holm_counts_family_arms_without_results_as_p_one(tmp_path, monkeypatch):
    """A report made while an arm of the family has no finished runs is as strict as the final one: the
    missing arm counts in the family with p = 1."""
    from rollwise.bench import plan_report

    p = planmod.parse_plan(PLAN)
    out = tmp_path / "out"
    real = plan_report.load_arm
    monkeypatch.setattr(plan_report, "load_arm", lambda plan, o, arm: [None] * 6 if arm == "greso" else real(plan, o, arm))
    planmod.run_plan(p, PLAN.encode(), tmp_path / "plan.yaml", out, log=lambda m: None)
    s = plan_report.summarize_plan(p, out, power_sims=50)
    aa = s["arms"]["grpo-aa"]
    assert s["arms"]["greso"] == {"seeds_paired": 0}
    assert aa["p_holm"] == pytest.approx(min(1.0, 2 * aa["p"]))  # m = 2, not 1


def test_bad_arm_settings_are_refused_before_the_plan_is_recorded(tmp_path, capsys):
    text = PLAN.replace("engine: sim\n", "").replace("greso: {planner: greso}", "greso: {planner: greso, set: {batch_size: -4}}")
    f = write(tmp_path, text)
    assert main(["bench", "--plan", str(f), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "arms.greso:" in err and "batch_size" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_plan_runs_end_on_the_compute_budget_and_evaluate_at_each_share_of_it(tmp_path):
    """WAVE3: the compute budget under the plan's profile ends a run and spaces its evaluations; the token
    budget is only a cap. (The simulator counts tokens only: its runs keep the token budget.)"""
    from rollwise.bench.runner import run_settings
    from rollwise.run.config import load_config

    p = planmod.parse_plan(PLAN.replace("engine: sim\n", ""))
    cfg = planmod.arm_config(p, "greso", tmp_path)
    s = run_settings(cfg, "default", "greso", p.seeds[0])
    assert s["budget_compute"] == 4000 and s["cost_profile"] == "gpu-h100-v1"
    assert s["eval_every_compute"] == pytest.approx(4000 / p.evaluations) and s["eval_every_tokens"] == 0
    assert s["budget_tokens"] == 6000  # the cap
    load_config(None, s)  # a config the loop takes
    sim = planmod.arm_config(planmod.parse_plan(PLAN), "greso", tmp_path)
    assert "budget_compute" not in run_settings(sim, "default", "greso", 0)


@pytest.mark.parametrize("key", ["budget_tokens", "eval_every_compute", "cost_profile"])
def test_an_arm_may_not_set_what_makes_the_arms_comparable(key):
    with pytest.raises(planmod.PlanError, match=f"arms.greso: set: '{key}' is the plan's to set"):
        planmod.parse_plan(PLAN.replace("  greso: {planner: greso}", f"  greso: {{planner: greso, set: {{{key}: 1}}}}"))


@pytest.mark.slow  # among the ten slowest core tests (--durations): marked, still run by default
def test_also_against_compares_an_arm_with_another_arm_described_not_decided(tmp_path):
    """WAVE3: an arm that trains more rows per group than the baseline is also compared with GRPO at the
    nearest n. The comparison pairs by plan seed, reads the same primary figure and stays out of Holm."""
    text = PLAN.replace("  greso: {planner: greso}", "  greso: {planner: greso, also_against: [grpo-aa]}")
    f = write(tmp_path, text)
    out = tmp_path / "out"
    assert main(["bench", "--plan", str(f), "--out", str(out)]) == 0
    arms = json.loads((out / "summary.json").read_text())["arms"]
    also = arms["greso"]["also"]["grpo-aa"]
    assert also["seeds_paired"] == 6
    # greso's AUC minus grpo-aa's, seed by seed: the difference of their means against the same baseline
    assert also["primary"]["diff"] == pytest.approx(arms["greso"]["mean_auc"] - arms["grpo-aa"]["mean_auc"])
    assert "p_holm" not in also and "Also compared" in (out / "report.md").read_text()
    for bad, message in ((["grpo"], "also_against 'grpo' must be another arm, not the baseline"),
                         (["nope"], "also_against 'nope' must be another arm"), ([{"x": 1}], "also_against.0. must be a string")):
        with pytest.raises(planmod.PlanError, match=message):
            planmod.parse_plan(PLAN.replace("  greso: {planner: greso}", f"  greso: {{planner: greso, also_against: {bad}}}"))


def test_a_plan_runs_every_arm_from_one_queue(tmp_path, monkeypatch):
    """No core idles at an arm's last seed: with 2 jobs, 3 arms x 1 seed start as 2 + 1, the second arm's
    run beside the first's (one bench per arm would run them one at a time)."""
    import time as _time

    from rollwise.bench import runner

    started = []
    monkeypatch.setattr(runner, "_ensure_base", lambda cfg, log: None)
    monkeypatch.setattr(runner, "run_command", lambda cfg, *key: started.append((cfg.out, _time.perf_counter()))
                        or [sys.executable, "-c", "import time; time.sleep(1.0)"])
    f = write(tmp_path, PLAN.replace("engine: sim\n", "").replace("seeds: [0, 1, 2, 3, 4, 5]", "seeds: [0]")
              .replace("family: [grpo-aa, greso]", "family: [grpo-aa, greso]\nnotes: one seed"))
    p, raw = planmod.load_plan(f)
    planmod.run_plan(p, raw, f, tmp_path / "out", jobs=2, log=lambda m: None)
    arms = [Path(o).name for o, _ in started]
    assert arms == ["grpo", "grpo-aa", "greso"]
    assert started[1][1] - started[0][1] < 0.8 and started[2][1] - started[0][1] >= 0.9
    assert all((Path(o) / "runs/default").exists() for o, _ in started)


def test_the_report_shows_the_other_evaluation_figure_beside_the_primary(tmp_path):
    """A greedy primary with samples: the sampled figure is read at the start and at the budget for every
    arm (sharpening shows there). Hand-made runs: sampled accuracy .3 -> .5 (grpo) and .3 -> .7 (greso) at
    compute 4000, the budget."""
    from rollwise.bench.plan_report import summarize_plan

    p = planmod.parse_plan(PLAN.replace("engine: sim\n", "").replace("primary: greedy", "primary: greedy, samples: 2"))
    out = tmp_path / "out"
    for arm, end in (("grpo", 0.5), ("grpo-aa", 0.5), ("greso", 0.7)):
        cfg = planmod.arm_config(p, arm, out)
        for s in p.run_seeds(arm):
            d = run_dir(cfg, "default", p.arms[arm].planner, s)
            d.mkdir(parents=True)
            rows = [{"step": 0, "tokens": 0, "tokens_train": 0, "prompt_tokens": 0, "learner_tokens": 0, "old_logprob_tokens": 0,
                     "eval_acc": 0.6, "eval_sampled_acc@2": 0.3},
                    {"step": 5, "tokens": 4000, "tokens_train": 4000, "prompt_tokens": 0, "learner_tokens": 0, "old_logprob_tokens": 0,
                     "eval_acc": 0.6, "eval_sampled_acc@2": end}]
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (d / "config.json").write_text(json.dumps({"learner": {"epochs": 1}}))
            (d / "done.json").write_text("{}")
    summary = summarize_plan(p, out, power_sims=20)
    sec = summary["secondary"]["eval_sampled_acc@2"]
    assert sec["grpo"]["mean"] == pytest.approx([0.3, 0.5]) and sec["greso"]["mean"] == pytest.approx([0.3, 0.7])
    assert "eval_acc" not in summary["secondary"]
    from rollwise.bench.plan_report import markdown
    assert "| greso | 6 | 0.6000 | 0.600 ± 0.000 | 0.300 → 0.700 ± 0.000 |" in markdown(summary)


# ---- plans that lie or hang (issue 45 item 4) ------------------------------------------------------


def refused(tmp_path, capsys, text, *args) -> str:
    """`rollwise bench --plan` on `text` (with args, e.g. --dry-run): exit 2 with one line, nothing in --out."""
    f = write(tmp_path, text)
    out = tmp_path / "out"
    assert main(["bench", "--plan", str(f), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert not out.exists() or not any(out.rglob("*")), "a refused plan wrote into --out"
    return err


@pytest.mark.parametrize("args", [[], ["--dry-run"]])
def test_a_key_given_twice_is_refused_naming_file_key_and_line(tmp_path, capsys, args):
    # two arms of one name: safe_load kept the second (the report called greso "dapo")
    text = PLAN.replace("  greso: {planner: greso}", "  greso: {planner: greso}\n  greso: {planner: dapo}")
    err = refused(tmp_path, capsys, text, *args)
    line = text.splitlines().index("  greso: {planner: dapo}") + 1
    assert f"key 'greso' given twice (line {line}; first on line {line - 1})" in err and "plan.yaml" in err
    err = refused(tmp_path, capsys, PLAN.replace("data_seed: 0", "data_seed: 0\ndata_seed: 3"), *args)
    assert "key 'data_seed' given twice" in err
    err = refused(tmp_path, capsys, PLAN.replace("alpha: 0.05,", "alpha: 0.05, alpha: 0.5,"), *args)
    assert "key 'alpha' given twice" in err


def test_a_config_with_a_key_given_twice_is_refused(tmp_path, capsys):
    from rollwise.run.config import load_config

    f = tmp_path / "c.yaml"
    f.write_text("learner:\n  lr: 0.001\n  lr: 0.1\n")
    with pytest.raises(ValueError, match=r"c.yaml: key 'lr' given twice \(line 3; first on line 2\)"):
        load_config(f)


@pytest.mark.parametrize("old, new, message", [
    ("compute_units: 4000", "compute_units: .nan", "budget.compute_units must be a finite number > 0, got nan"),
    ("compute_units: 4000", "compute_units: .inf", "budget.compute_units must be a finite number > 0, got inf"),
    ("goal_ratio: 3", "goal_ratio: .nan", "decision.goal_ratio must be a finite number > 0, got nan"),
    ("goal_ratio: 3", "goal_ratio: .inf", "decision.goal_ratio must be a finite number > 0, got inf"),
    ("alpha: 0.05", "alpha: .nan", "decision.alpha must be in (0, 1), got nan"),
])
def test_non_finite_plan_numbers_are_refused(tmp_path, capsys, old, new, message):
    assert message in refused(tmp_path, capsys, PLAN.replace(old, new), "--dry-run")


@pytest.mark.parametrize("old, new, message", [
    ("seeds: [0, 1, 2, 3, 4, 5]", "seeds: {start: 0, count: 1000000000}", "seeds.count must be in 1..1000"),
    ("seeds: [0, 1, 2, 3, 4, 5]", "seeds: {start: 0, count: 0}", "seeds.count must be in 1..1000"),
    ("seeds: [0, 1, 2, 3, 4, 5]", f"seeds: {list(range(1001))}", "lists 1001 seeds; at most 1000"),
    ("size: 200", "size: 1000000000", "evaluation.size must be <= 1e+06"),
    ("evaluations: 3", "evaluations: 100000000", "evaluation.evaluations must be <= 1000"),
    ("tokens: 6000", "tokens: 10000000000000000", "budget.tokens must be <= 1e+12"),
    ("engine: sim", "engine: sim\npool_size: 100000000000", "pool_size must be <= 1e+06"),
    ("data_seed: 0", "data_seed: -1", "data_seed must be in [0, 2**63)"),
])
def test_plan_sizes_are_bounded_so_a_dry_run_cannot_hang(tmp_path, capsys, old, new, message):
    import time

    t0 = time.perf_counter()
    err = refused(tmp_path, capsys, PLAN.replace(old, new), "--dry-run")
    assert message in err and time.perf_counter() - t0 < 30


@pytest.mark.parametrize("content", [b"", b"\n", b"abc  plan.yaml\n", b"\xff\xfe"])
def test_an_empty_or_damaged_plan_sha256_is_one_line(tmp_path, capsys, content):
    f = write(tmp_path, PLAN.replace("seeds: [0, 1, 2, 3, 4, 5]", "seeds: [0, 1]"))
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.yaml").write_bytes(f.read_bytes())
    (out / "plan.sha256").write_bytes(content)
    for args in ([], ["--dry-run"], ["--report-only"]):
        assert main(["bench", "--plan", str(f), "--out", str(out), *args]) == 2, args
        err = capsys.readouterr().err
        assert "plan.sha256: does not hold a sha256" in err and err.count("\n") == 1, (args, err)
    assert sorted(q.name for q in out.iterdir() if q.name != ".lock") == ["plan.sha256", "plan.yaml"]


@pytest.mark.parametrize("change, message", [
    (("greso: {planner: greso}", "greso: {planner: greso, set: {learner.lr: 0.1}}"),
     "arms.greso: set: 'learner.lr' has no meaning in the simulator"),
    (("greso: {planner: greso}", "greso: {planner: greso, set: {batch_size: 0}}"), "arms.greso: sim: need batch >= 1"),
    (("engine: sim", "engine: sim\npool_size: 0"), "pool_size must be >= 1, got 0"),
])
@pytest.mark.parametrize("args", [[], ["--dry-run"]])
def test_a_sim_plans_bad_settings_are_refused_before_anything_is_recorded(tmp_path, capsys, change, message, args):
    """docs/bench3.md: a plan whose settings cannot run is refused before its record is written (a
    recorded plan could never run there, nor change); the message is in the plan's words."""
    err = refused(tmp_path, capsys, PLAN.replace(*change), *args)
    assert message in err and "--set" not in err and "--pool-size" not in err


def test_bench_status_on_a_plan_yaml_that_is_not_utf8_names_the_file(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "plan.yaml").write_bytes(b"name: \xff\xfe\n")
    assert main(["bench", "status", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"plan {out / 'plan.yaml'}: not UTF-8 text" in err and err.count("\n") == 1


# ---- plans take task options (issue 48 item 2) ------------------------------------------------------


def test_a_plan_level_task_options_block_reaches_every_arms_runs(tmp_path):
    from rollwise.bench.runner import run_settings

    text = PLAN.replace("task: arithmetic", "task: arithmetic\ntask_options: {heldout_size: 400}")
    p = planmod.parse_plan(text)
    assert p.options == {"heldout_size": 400}
    for arm in p.arms:
        cfg = planmod.arm_config(p, arm, tmp_path)
        opts = run_settings(cfg, "default", cfg.planners[0], cfg.seed_values[0])["task_options"]
        assert opts["heldout_size"] == 400 and opts["data_seed"] == 0 and opts["pool_size"] == 300
    assert planmod.parse_plan(PLAN).options == {}  # no block: the task's defaults, as before


@pytest.mark.parametrize("arm_set", ["{task_options.heldout_size: 400}", "{task_options: {heldout_size: 400}}",
                                     "{task_options.split: test}", "{task: chain}"])
def test_an_arm_may_not_change_the_task(tmp_path, capsys, arm_set):
    err = refused(tmp_path, capsys, PLAN.replace("greso: {planner: greso}", f"greso: {{planner: greso, set: {arm_set}}}"))
    assert "arms.greso: set:" in err and ("may not change the task" in err or "is the plan's to set" in err)


@pytest.mark.parametrize("block, message", [
    ("{data_seed: 3}", "task_options: 'data_seed' is set by the plan's own fields"),
    ("{zz_unknown: 1}", "zz_unknown"),
    ("[1, 2]", "task_options must be a mapping"),
])
def test_a_bad_task_options_block_is_refused_by_the_dry_run_writing_nothing(tmp_path, capsys, block, message):
    text = PLAN.replace("engine: sim\n", "").replace("task: arithmetic", f"task: arithmetic\ntask_options: {block}")
    for args in (["--dry-run"], []):
        assert message in refused(tmp_path, capsys, text, *args)


def test_dry_run_builds_a_reasoning_gym_task_and_names_a_misspelled_dataset(tmp_path, capsys):
    pytest.importorskip("reasoning_gym", reason="the reasoning-gym extra is not installed")
    text = PLAN.replace("engine: sim\n", "").replace(
        "task: arithmetic", "task: reasoning-gym\ntask_options: {dataset: gdc, pool_size: 50, validation_size: 10, "
        "test_size: 10, sft_size: 10}")
    for args in (["--dry-run"], []):
        err = refused(tmp_path, capsys, text, *args)
        assert "reasoning-gym has no dataset 'gdc'; close matches: gcd" in err
    # spelled right, the dry run passes and still writes nothing
    f = write(tmp_path, text.replace("dataset: gdc", "dataset: gcd"))
    assert main(["bench", "--plan", str(f), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "core-hours in all" in capsys.readouterr().out and not (tmp_path / "out").exists()


# ---- records that change without a word (issue 45 item 5) -------------------------------------------


def test_a_run_cut_after_it_finished_is_flagged_by_status_and_refused_by_the_report(tmp_path, capsys):
    f = write(tmp_path, PLAN.replace("seeds: [0, 1, 2, 3, 4, 5]", "seeds: [0, 1]"))
    out = tmp_path / "out"
    assert main(["bench", "--plan", str(f), "--out", str(out)]) == 0
    run = out / "arms" / "greso" / "runs" / "default" / "greso" / "seed1"
    done = json.loads((run / "done.json").read_text())
    lines = (run / "metrics.jsonl").read_text().splitlines(keepends=True)
    assert done["rows"] == len(lines) > 2 and len(done["metrics_sha256"]) == 64  # recorded when it finished
    report = (out / "report.md").read_bytes()
    capsys.readouterr()
    (run / "metrics.jsonl").write_text(lines[0])  # cut to one row: still "done" by its done.json
    assert main(["bench", "status", str(out)]) == 1
    text = capsys.readouterr().out
    assert f"WARNING: counted done, but its record no longer holds: {run / 'metrics.jsonl'}: changed since the run " \
           f"finished (1 rows now, {len(lines)} recorded; sha256 differs)" in text
    for args in (["--report-only"], []):  # a rerun reuses finished runs: it must not report over the cut one
        assert main(["bench", "--plan", str(f), "--out", str(out), *args]) == 2
        err = capsys.readouterr().err
        assert "1 finished run(s) no longer match their record" in err and err.count("\n") == 1
        assert (out / "report.md").read_bytes() == report  # no new verdict
    (run / "metrics.jsonl").unlink()
    assert main(["bench", "--plan", str(f), "--out", str(out), "--report-only"]) == 2
    assert "missing; the run recorded" in capsys.readouterr().err


def test_legacy_runs_without_a_digest_are_reported_and_labelled(tmp_path, capsys):
    """Records made before done.json held digests (benchmarks/results) still report, with a note."""
    f = write(tmp_path, PLAN.replace("seeds: [0, 1, 2, 3, 4, 5]", "seeds: [0, 1]"))
    out = tmp_path / "out"
    assert main(["bench", "--plan", str(f), "--out", str(out)]) == 0
    for d in out.rglob("done.json"):
        rec = json.loads(d.read_text())
        d.write_text(json.dumps({k: v for k, v in rec.items() if k not in ("rows", "metrics_sha256")}))
    capsys.readouterr()
    assert main(["bench", "--plan", str(f), "--out", str(out), "--report-only"]) == 0
    assert "note: 6 of 6 finished runs predate recorded digests (legacy)" in capsys.readouterr().out
    assert main(["bench", "status", str(out)]) == 0
    assert "predate recorded digests (legacy): not checked" in capsys.readouterr().out


def test_a_plain_bench_report_only_refuses_a_run_cut_after_it_finished(tmp_path, capsys):
    out = tmp_path / "b"
    argv = ["bench", "--engine", "sim", "--planners", "greso", "--seeds", "1", "--budget", "3000",
            "--eval-size", "50", "--out", str(out)]
    assert main(argv) == 0
    m = next(out.rglob("greso/seed0/metrics.jsonl"))
    m.write_text(m.read_text().splitlines(keepends=True)[0])
    capsys.readouterr()
    assert main(argv + ["--report-only"]) == 2
    err = capsys.readouterr().err
    assert "bench --report-only: 1 finished run(s) no longer match their record" in err and err.count("\n") == 1
