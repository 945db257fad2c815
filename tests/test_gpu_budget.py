"""A run, and a plan, may end on modelled GPU-seconds (issue 41 item 6): each trained step's work at a cluster
profile's scale (response lengths x a fixed length scale), priced by the step-time model in the run's mode:
systems/scale.py's GpuMeter, the function the reports read GPU-hours with. The run ends at the first step whose
total reaches the budget and is evaluated at the first step after each multiple of the spacing, exactly as the
compute budget does; a killed run resumes to the same rows. Hand-computed under a tiny profile."""
import json
import os
import sys

import pytest

from rollwise.bench import plan as planmod
from rollwise.cli import main
from rollwise.run.budget import Budget, Spent
from rollwise.run.config import load_config
from rollwise.run.loop import Trainer
from rollwise.systems import scale
from rollwise.systems.profile import load_profile

from conftest import SMALL, kill_and_resume
from test_bench_plan import PLAN
from test_gpu_hours_fallback import TINY
from test_loop import read, strip


@pytest.fixture
def tiny(tmp_path):
    """test_gpu_hours_fallback's tiny profile: a decode iteration 1 s (up to 4 rows), prefill P / 4 s per group,
    training T s for T trained tokens, sync 0.5 s, 1 GPU."""
    import yaml

    path = tmp_path / "tiny-v1.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return str(path)


def shaped_rows(lengths, rows_per_step=4):
    """Rows as the trainer writes them: per step one group of `rows_per_step` rows of one length, a 4-token
    prompt, 2 learner tokens per step; cumulative counts."""
    rows, tot = [{"step": 0, "tokens": 0}], {"rollouts": 0, "prompt_tokens": 0, "learner_tokens": 0}
    for s, m in enumerate(lengths, 1):
        tot = {"rollouts": tot["rollouts"] + rows_per_step, "prompt_tokens": tot["prompt_tokens"] + 4,
               "learner_tokens": tot["learner_tokens"] + 2}
        rows.append({"step": s, "prompts": 1, "len_mean": m, "len_p50": m, "len_p90": m, "len_max": m, **tot})
    return rows


def test_a_step_of_known_lengths_costs_known_gpu_seconds(tiny):
    # TINY (1 GPU): 4 rows of 3 tokens at factor 1: prefill 4 / 4 = 1 s, 3 decode iterations of 1 s, training
    # (6 + 2) x 2 / 8 = 2 s, sync 0.5 s: 6.5 s. At factor 2: 6 tokens and prefill 8 / 4 = 2 s, training 4 s:
    # 2 + 6 + 4 + 0.5 = 12.5 s
    p = load_profile(tiny)
    m = scale.GpuMeter(p, 1.0, "sync")
    assert [m.add(r) for r in shaped_rows([3, 3])] == pytest.approx([0.0, 6.5, 13.0])
    assert scale.gpu_seconds(shaped_rows([3]), p, 2.0, "sync") == pytest.approx([0.0, 12.5])


@pytest.mark.parametrize("budget, steps", [(13.0, 2), (13.01, 3), (6.5, 1), (26.0, 4)])
def test_a_budget_ends_the_run_at_the_step_that_reaches_it(tiny, budget, steps):
    """6.5 GPU-seconds a step: the step whose total reaches the budget is the last, as with compute units."""
    b = Budget(gpu_seconds=budget, every_gpu_seconds=5.0, cluster=load_profile(tiny), length_scale=1.0)
    meter, ended, evals = b.meter([]), None, []
    before = Spent(0, 0.0, meter.total)
    for r in shaped_rows([3] * 10)[1:]:
        spent = Spent(0, 0.0, meter.add(r))
        if b.crossed(before, spent):
            evals.append(r["step"])
        before = spent
        if b.exhausted_at(spent):
            ended = r["step"]
            break
    assert ended == steps
    assert evals == [s for s in (1, 2, 3, 4) if s <= steps]  # 6.5, 13, 19.5, 26 each pass a multiple of 5
    # a resumed run's meter recounts its recorded rows to the same total
    assert b.meter(shaped_rows([3] * steps)).total == pytest.approx(6.5 * steps)


def _cfg(out, **kw):
    return load_config(None, {**SMALL, "out": str(out), "steps": 50, "eval_every": 0, "eval_size": 8,
                              "budget_gpu_seconds": 1000.0, "eval_every_gpu_seconds": 400.0,
                              "length_scale": 200.0, **kw})


def test_a_run_ends_on_gpu_seconds_and_evaluates_at_each_share_of_them(tmp_path, small_policy):
    """Every row's `model_gpu_s` is scale.gpu_seconds over the run's rows (what a report reads); the run stops at
    the first step at or past the budget; it is evaluated at the first step after each multiple of the spacing
    (and at the end). Run again on its directory, it trains no further step."""
    rows = Trainer(_cfg(tmp_path / "g"), log=lambda *a: None).run()
    want = scale.gpu_seconds(rows, load_profile("h100x16-llama8b-v1"), 200.0, "sync")
    trained = [r for r in rows if r["step"] > 0]
    assert [r["model_gpu_s"] for r in trained] == want[1:]  # exactly: one code path
    assert trained[-1]["model_gpu_s"] >= 1000 > trained[-2]["model_gpu_s"] and len(trained) < 50
    evaluated = [r["step"] for r in rows if "eval_acc" in r]
    crossed = [b["step"] for a, b in zip(rows, rows[1:]) if b["model_gpu_s"] // 400 > a.get("model_gpu_s", 0) // 400]
    assert evaluated == sorted({0, *crossed, trained[-1]["step"]})
    again = Trainer(_cfg(tmp_path / "g"), log=lambda *a: None).run()  # resumes at the budget: nothing more
    assert strip(again) == strip(rows)
    # without the budget the rows carry no model_gpu_s (a run as before)
    plain = Trainer(load_config(None, {**SMALL, "out": str(tmp_path / "p"), "steps": 1}), log=lambda *a: None).run()
    assert all("model_gpu_s" not in r for r in plain)


@pytest.mark.slow
def test_kill_and_resume_on_a_gpu_second_budget_is_bit_identical(tmp_path, small_policy, cache_dir):
    args = [sys.executable, "-m", "rollwise.cli", "train", "--steps", "50", "--set", "eval_every=0",
            "--set", "budget_gpu_seconds=1000", "--set", "eval_every_gpu_seconds=400", "--set", "length_scale=200"]
    for k, v in SMALL.items():
        if k != "eval_every":
            args += ["--set", f"{k}={json.dumps(v)}"]
    env = {**os.environ, "ROLLWISE_CACHE": str(cache_dir)}
    import subprocess

    subprocess.run(args + ["--out", str(tmp_path / "full")], env=env, check=True, capture_output=True)
    full = read(tmp_path / "full" / "metrics.jsonl")
    assert full[-1]["model_gpu_s"] >= 1000 and len(full) > 4
    killed = tmp_path / "killed"
    done_before, res = kill_and_resume(args, killed, env, rows=3)
    if 3 <= done_before < len(full):  # killed after step 2's row (step 1 checkpointed), before the end
        assert "resuming" in res.stdout
    assert strip(read(killed / "metrics.jsonl")) == strip(full)


@pytest.mark.parametrize("key, value, message", [
    ("budget_gpu_seconds", 100.0, "length_scale must be > 0 with budget_gpu_seconds"),
    ("cluster_profile", "h1", "cluster_profile: no cluster profile 'h1'"),
    ("budget_gpu_seconds", -1.0, "budget_gpu_seconds must be a finite number >= 0"),
])
def test_bad_run_settings_are_one_line(tmp_path, key, value, message):
    kw = {"budget_gpu_seconds": 100.0, "length_scale": 200.0, key: value}
    if key == "budget_gpu_seconds" and value == 100.0:
        kw["length_scale"] = 0.0
    with pytest.raises(ValueError, match=message) as e:
        load_config(None, {"out": str(tmp_path), **kw})
    assert "\n" not in str(e.value)


GPU_PLAN = PLAN.replace("engine: sim\n", "").replace(
    "budget: {compute_units: 4000, profile: gpu-h100-v1, tokens: 6000}",
    "budget: {compute_units: 4000, profile: gpu-h100-v1, tokens: 6000, gpu_seconds: 3000, "
    "cluster: h100x16-llama8b-v1, length_scale: 200}")


def test_a_plan_parses_its_gpu_budget_and_gives_every_arm_the_same(tmp_path):
    from rollwise.bench.runner import run_settings

    p = planmod.parse_plan(GPU_PLAN)
    assert (p.budget_gpu_seconds, p.cluster, p.length_scale) == (3000.0, "h100x16-llama8b-v1", 200.0)
    for arm in p.arms:
        s = run_settings(planmod.arm_config(p, arm, tmp_path), "default", p.arms[arm].planner, p.seeds[0])
        assert (s["budget_gpu_seconds"], s["cluster_profile"], s["length_scale"]) == (3000.0, "h100x16-llama8b-v1", 200.0)
        # evaluations at every 1/evaluations of the GPU-seconds, not of the compute (which stays a cap)
        assert s["eval_every_gpu_seconds"] == pytest.approx(3000 / p.evaluations) and s["eval_every_compute"] == 0
        assert s["budget_compute"] == 4000
        load_config(None, s)
    # a plan without it: no GPU-second key reaches a run (its settings, and so its runs, as before)
    plain = planmod.parse_plan(PLAN.replace("engine: sim\n", ""))
    s = run_settings(planmod.arm_config(plain, "greso", tmp_path), "default", "greso", 0)
    assert plain.budget_gpu_seconds == 0 and not any("gpu" in k or k in ("cluster_profile", "length_scale") for k in s)


@pytest.mark.parametrize("old, new, message", [
    ("cluster: h100x16-llama8b-v1, ", "", "budget.gpu_seconds needs budget.cluster"),
    (", length_scale: 200", "", "budget.gpu_seconds needs budget.length_scale"),
    ("cluster: h100x16-llama8b-v1", "cluster: h200", "budget.cluster: no cluster profile 'h200'"),
    ("gpu_seconds: 3000", "gpu_seconds: 0", "budget.gpu_seconds must be a finite number > 0"),
    ("gpu_seconds: 3000", "gpu_seconds: -5", "budget.gpu_seconds must be a finite number > 0"),
    ("length_scale: 200", "length_scale: 0", "budget.length_scale must be a finite number > 0"),
    ("gpu_seconds: 3000, ", "", "budget.cluster: read only with budget.gpu_seconds"),
    ("gpu_seconds: 3000, cluster: h100x16-llama8b-v1, ", "", "budget.length_scale: read only with budget.gpu_seconds"),
    ("gpu_seconds: 3000", "gpu_secs: 3000", "budget: unknown key 'gpu_secs'"),
])
def test_a_bad_gpu_budget_is_one_line_naming_the_field(tmp_path, capsys, old, new, message):
    f = tmp_path / "plan.yaml"
    f.write_text(GPU_PLAN.replace(old, new))
    assert GPU_PLAN.replace(old, new) != GPU_PLAN
    assert main(["bench", "--plan", str(f), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and str(f) in err


def test_the_simulator_refuses_a_gpu_budget():
    with pytest.raises(planmod.PlanError, match="simulator's rows carry no response lengths"):
        planmod.parse_plan(GPU_PLAN.replace("task: arithmetic", "task: arithmetic\nengine: sim"))


@pytest.mark.parametrize("key", ["budget_gpu_seconds", "eval_every_gpu_seconds", "cluster_profile", "length_scale"])
def test_an_arm_may_not_set_the_gpu_budget(key):
    with pytest.raises(planmod.PlanError, match=f"arms.greso: set: '{key}' is the plan's to set"):
        planmod.parse_plan(GPU_PLAN.replace("  greso: {planner: greso}", f"  greso: {{planner: greso, set: {{{key}: 1}}}}"))


TORCH_PLAN = """
name: tiny-gpu
kind: exploratory
task: arithmetic
data_seed: 0
baseline: grpo
arms:
  grpo: {planner: uniform, set: {batch_size: 8, n: 4}}
  dapo: {planner: dapo, set: {batch_size: 8, n: 4}}
seeds: [0]
pool_size: 40
budget: {compute_units: 1000000, profile: gpu-h100-v1, tokens: 100000, gpu_seconds: 600,
         cluster: h100x16-llama8b-v1, length_scale: 200}
evaluation: {split: validation, size: 8, evaluations: 2, primary: greedy}
family: [dapo]
decision: {alpha: 0.05}
"""


@pytest.mark.slow
def test_a_tiny_plan_ends_its_runs_on_gpu_seconds_end_to_end(tmp_path, capsys):
    """`rollwise bench --plan` on the embedded arithmetic base: every run ends at the first step at or past 600
    modelled GPU-seconds and is evaluated at each half of them; the dry run says how it estimates; the report
    reads GPU-hours under the plan's cluster and length scale; run again, nothing is redone."""
    from rollwise.bench.runner import run_dir

    f = tmp_path / "plan.yaml"
    f.write_text(TORCH_PLAN)
    out = tmp_path / "out"
    assert main(["bench", "--plan", str(f), "--out", str(out), "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert "GPU-second budget: a typical step of the baseline" in said and "h100x16-llama8b-v1" in said
    assert main(["bench", "--plan", str(f), "--out", str(out)]) == 0
    p = planmod.load_plan(f)[0]
    profile = load_profile("h100x16-llama8b-v1")
    for arm in p.arms:
        d = run_dir(planmod.arm_config(p, arm, out), "default", p.arms[arm].planner, 0)
        rows = read(d / "metrics.jsonl")
        assert [r.get("model_gpu_s", 0.0) for r in rows] == scale.gpu_seconds(rows, profile, 200.0, "sync")
        assert rows[-1]["model_gpu_s"] >= 600 > rows[-2].get("model_gpu_s", 0.0)
        evaluated = [r["step"] for r in rows if "eval_acc" in r]
        crossed = [b["step"] for a, b in zip(rows, rows[1:]) if b["model_gpu_s"] // 300 > a.get("model_gpu_s", 0) // 300]
        assert evaluated == sorted({0, *crossed, rows[-1]["step"]})
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["budget_gpu_seconds"], summary["cluster"], summary["length_scale"]) == (600, "h100x16-llama8b-v1", 200)
    g = summary["arms"]["dapo"]["gpu_hours"]
    assert (g["profile"], g["factor"]) == ("h100x16-llama8b-v1", 200.0)
    # the figures are read where the runs ended: on modelled GPU-seconds, at the plan's 600
    assert summary["curves"]["grpo"]["x"][-1] == 600 and summary["curve_fits"]["budget"] == 600
    assert summary["arms"]["dapo"]["cost_sensitivity"] == {}  # compute units' prices do not apply
    md = (out / "report.md").read_text()
    assert "Budget **600 modelled GPU-seconds** under `h100x16-llama8b-v1`" in md and "each cost ratio" not in md
    before = {x: x.stat().st_mtime_ns for x in out.rglob("metrics.jsonl")}
    capsys.readouterr()
    assert main(["bench", "--plan", str(f), "--out", str(out)]) == 0
    assert capsys.readouterr().out.count("1 runs already finished, 0 to go") == 2  # one per arm
    assert {x: x.stat().st_mtime_ns for x in out.rglob("metrics.jsonl")} == before
