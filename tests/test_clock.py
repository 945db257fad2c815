"""A plan on the clock (issue 42 item 1): interleaved arms, wall and CPU seconds to target, the paired
per-seed speed, and a wall-clock plan's budget and one-at-a-time runs. Hand-computed cases."""
import json

import numpy as np
import pytest

from rollwise.bench import clock
from rollwise.bench import plan as planmod
from rollwise.bench.runner import interleave, run_dir

from test_bench_plan import PLAN


def test_interleave_goes_seed_by_seed_rotating_the_arms():
    runs = [["a0", "a1", "a2"], ["b0", "b1"], ["c0", "c1", "c2"]]
    assert interleave(runs) == ["a0", "b0", "c0", "b1", "c1", "a1", "c2", "a2"]
    assert interleave([["x0", "x1"]]) == ["x0", "x1"] and interleave([]) == []


def test_median_paired_ratio_by_hand():
    r = clock.median_paired_ratio([2.0, 4.0, 6.0], [1.0, 4.0, 2.0], np.random.default_rng(0))
    assert r["per_seed"] == [2.0, 1.0, 3.0] and r["ratio"] == 2.0
    assert 1.0 <= r["lo"] <= 2.0 <= r["hi"] <= 3.0


def _rows(sec_per_step, cpu_per_step, accs, steps_per_eval=2):
    """Step 0 at accs[0], then an evaluation every `steps_per_eval` steps."""
    rows = [{"step": 0, "tokens": 0, "eval_acc": accs[0]}]
    for i, a in enumerate(accs[1:], 1):
        s = i * steps_per_eval
        rows.append({"step": s, "tokens": 100 * s, "eval_acc": a, "wall_s": sec_per_step * s,
                     "cpu_s": cpu_per_step * s})
    return rows


def test_clock_figures_read_the_same_curve_on_wall_and_cpu_seconds():
    """The same learning per step; the arm takes half the wall seconds per step and the same CPU seconds
    (a second core): 2x on the wall clock, 1x on CPU seconds, to target and per step."""
    accs = [0.2, 0.4, 0.6, 0.7, 0.7]
    base = [_rows(1.0, 1.0, accs) for _ in range(3)]
    arm = [_rows(0.5, 1.0, accs) for _ in range(3)]
    f = clock.clock_figures(base, arm, np.random.default_rng(0))
    # target: 80% of the way from 0.2 to 0.7 = 0.6, crossed at step 4: 4 s (base) and 2 s (arm) on the wall
    assert f["wall_s"]["to_target"]["target"] == pytest.approx(0.6)
    assert f["wall_s"]["to_target"]["ratio"] == pytest.approx(2.0)
    assert f["cpu_s"]["to_target"]["ratio"] == pytest.approx(1.0)
    assert f["wall_s"]["per_step"]["ratio"] == pytest.approx(2.0)
    assert f["cpu_s"]["per_step"]["ratio"] == pytest.approx(1.0)
    assert f["steps"]["ratio"] == pytest.approx(1.0)  # the same learning per step: the speed is all of it
    assert f["wall_s"]["budget"] == pytest.approx(8.0)  # the longest run, when the plan sets no wall budget
    assert clock.clock_figures(base, arm, np.random.default_rng(0), wall_budget=6.0)["wall_s"]["budget"] == 6.0


def test_records_without_the_cpu_clock_give_no_clock_figures():
    old = [{k: v for k, v in r.items() if k != "cpu_s"} for r in _rows(1.0, 1.0, [0.2, 0.5])]
    assert clock.clock_figures([old], [old], np.random.default_rng(0)) is None
    assert "not available" in "\n".join(clock.markdown_lines({"a": {"clock": None}}))


WALL_PLAN = PLAN.replace("engine: sim\n", "").replace(
    "budget: {compute_units: 4000, profile: gpu-h100-v1, tokens: 6000}",
    "budget: {compute_units: 4000, profile: gpu-h100-v1, tokens: 6000, wall_seconds: 600}").replace(
    "  greso: {planner: greso}", "  greso: {planner: uniform, set: {mode: one-step-off, workers: 0}}")


def test_a_wall_clock_plan_caps_every_run_and_arms_may_set_the_mode(tmp_path):
    from rollwise.bench.runner import run_settings
    from rollwise.run.config import load_config

    p = planmod.parse_plan(WALL_PLAN)
    assert p.budget_seconds == 600 and p.wall_clock
    s = run_settings(planmod.arm_config(p, "greso", tmp_path), "default", "uniform", 0)
    assert s["budget_seconds"] == 600 and s["mode"] == "one-step-off"
    assert load_config(None, s).mode == "one-step-off"
    assert not planmod.parse_plan(PLAN).wall_clock


@pytest.mark.parametrize("new, message", [
    ("wall_seconds: -1", "budget.wall_seconds must be a finite number >= 0"),
    ("wall_secs: 600", "budget: unknown key 'wall_secs'"),
])
def test_bad_budget_fields_are_one_line(new, message):
    with pytest.raises(planmod.PlanError, match=message) as e:
        planmod.parse_plan(WALL_PLAN.replace("wall_seconds: 600", new))
    assert "\n" not in str(e.value)


def test_an_arm_may_not_set_the_wall_budget():
    with pytest.raises(planmod.PlanError, match="'budget_seconds' is the plan's to set"):
        planmod.parse_plan(PLAN.replace("  greso: {planner: greso}", "  greso: {planner: greso, set: {budget_seconds: 5}}"))


def test_a_wall_clock_plan_runs_one_run_at_a_time_and_logs_the_load(tmp_path, monkeypatch):
    from rollwise.bench import runner

    seen = {}
    monkeypatch.setattr(runner, "run_benches", lambda cfgs, jobs, log: seen.update(jobs=jobs))
    f = tmp_path / "plan.yaml"
    f.write_text(WALL_PLAN)
    p, raw = planmod.load_plan(f)
    logs = []
    planmod.run_plan(p, raw, f, tmp_path / "out", jobs=2, log=logs.append)
    assert seen["jobs"] == 1 and any("one run at a time" in m for m in logs)
    load = [json.loads(line) for line in (tmp_path / "out" / "load.jsonl").read_text().splitlines()]
    assert [x["when"] for x in load] == ["start", "end"] and len(load[0]["loadavg"]) == 3


def test_the_plan_report_has_a_clock_table(tmp_path):
    from rollwise.bench.plan_report import markdown, summarize_plan

    p = planmod.parse_plan(WALL_PLAN.replace("tokens: 6000, wall_seconds: 600", "tokens: 6000, wall_seconds: 8"))
    out = tmp_path / "out"
    accs = [0.2, 0.4, 0.6, 0.7, 0.7]
    for arm, wall in (("grpo", 1.0), ("grpo-aa", 1.0), ("greso", 0.5)):
        cfg = planmod.arm_config(p, arm, out)
        for s in p.run_seeds(arm):
            d = run_dir(cfg, "default", p.arms[arm].planner, s)
            d.mkdir(parents=True)
            rows = _rows(wall, 1.0, accs)
            for r in rows:  # compute units: 1 per token (decode only)
                r.update(tokens_train=r["tokens"], prompt_tokens=0, learner_tokens=0, old_logprob_tokens=0)
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (d / "config.json").write_text(json.dumps({"learner": {"epochs": 1}}))
            (d / "done.json").write_text("{}")
    summary = summarize_plan(p, out, power_sims=20)
    c = summary["arms"]["greso"]["clock"]
    assert c["wall_s"]["to_target"]["ratio"] == pytest.approx(2.0) and c["wall_s"]["budget"] == 8
    assert c["cpu_s"]["per_step"]["ratio"] == pytest.approx(1.0)
    md = markdown(summary)
    assert ("| greso | 2.00× [2.00×, 2.00×] | 1.00× [1.00×, 1.00×] | 1.00× [1.00×, 1.00×] | 2.00× [2.00×, 2.00×] "
            "| 1.00× [1.00×, 1.00×] | +0.0000 [+0.0000, +0.0000] | yes: nearly lossless |") in md


def test_equivalence_is_the_interval_inside_the_margin():
    base = [_rows(1.0, 1.0, [0.2, 0.5, 0.6]) for _ in range(4)]
    near = [_rows(1.0, 1.0, [0.2, 0.5, 0.6 + d]) for d in (0.004, -0.003, 0.002, 0.001)]
    far = [_rows(1.0, 1.0, [0.2, 0.5, 0.6 + d]) for d in (0.02, 0.03, 0.0, 0.01)]
    rng = np.random.default_rng(0)
    # the budget is the last evaluation's tokens (400): read there, the differences are the d's
    e = clock.equivalence(base, near, 400, rng)
    assert e["diff"] == pytest.approx(0.001) and e["equivalent"]
    f = clock.equivalence(base, far, 400, rng)
    assert f["diff"] == pytest.approx(0.015) and f["hi"] > 0.01 and not f["equivalent"]
    assert clock.equivalence_word(e) == "yes: nearly lossless" and clock.equivalence_word(f) == "not shown"
    assert clock.equivalence_word({"equivalent": False, "lo": 0.02, "hi": 0.03, "margin": 0.01}) == "no: higher"


def test_the_two_way_interval_reads_outcomes_at_the_evaluations_only(tmp_path):
    """Per-prompt outcomes exist at evaluation steps only; rows between evaluations must not hide them (the
    report said "not available" for every real run). Mean over prompts of the per-prompt area = the area of
    the mean accuracy, so the two-way figure's point estimate is the primary one."""
    from rollwise.bench.plan_report import summarize_plan
    from rollwise.run.evaluate import OUTCOMES

    p = planmod.parse_plan(WALL_PLAN)
    out = tmp_path / "out"
    for arm, accs in (("grpo", [0.2, 0.4, 0.5, 0.6, 0.6]), ("grpo-aa", [0.2, 0.4, 0.5, 0.6, 0.6]),
                      ("greso", [0.2, 0.5, 0.6, 0.7, 0.7])):
        cfg = planmod.arm_config(p, arm, out)
        for s in p.run_seeds(arm):
            d = run_dir(cfg, "default", p.arms[arm].planner, s)
            d.mkdir(parents=True)
            rows = []
            for r in _rows(1.0, 1.0, accs):
                r.update(tokens_train=r["tokens"], prompt_tokens=0, learner_tokens=0, old_logprob_tokens=0)
                if r["step"]:  # a trained row without an evaluation between each two evaluations
                    rows.append({k: v for k, v in r.items() if k != "eval_acc"} | {"step": r["step"] - 1,
                                                                                   "tokens": r["tokens"] - 100})
                rows.append(r)
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            bits = [np.packbits((np.arange(10) < round(10 * a)).astype(np.uint8)).tobytes().hex() for a in accs]
            (d / OUTCOMES).write_text("".join(json.dumps({"step": r["step"], "prompts": 10, "greedy": b}) + "\n"
                                              for r, b in zip([r for r in rows if "eval_acc" in r], bits)))
            (d / "config.json").write_text(json.dumps({"learner": {"epochs": 1}}))
            (d / "done.json").write_text("{}")
    arm = summarize_plan(p, out, power_sims=20)["arms"]["greso"]
    assert arm["primary_two_way"] is not None
    assert arm["primary_two_way"]["diff"] == pytest.approx(arm["primary"]["diff"])
