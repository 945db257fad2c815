"""The newcomer's path in docs/tasks.md ("Your family, end to end"), walked as a user runs it (issue 48, done
means): a base for a reasoning-gym family by name, a short run from it, a two-arm plan on it, its report.

The commands and the plan file are read from the page, so the page cannot drift from what is tested: each
numbered step of its bash block runs in bash (`rollwise` being this checkout's CLI) in a fresh directory,
the plan is the page's yaml block saved under the name the commands give it, and each step's real effects
are checked against what the page says it does."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## Your family, end to end"


def walkthrough() -> tuple[list[str], str]:
    """(the bash block's numbered steps, in order; the plan's yaml text) of the page's section."""
    text = (ROOT / "docs" / "tasks.md").read_text()
    assert text.count(SECTION) == 1, f"docs/tasks.md has no single section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    bash = re.findall(r"```bash\n(.*?)```", section, re.S)
    yamls = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(bash) == 1 and len(yamls) == 1, "the section has one bash block (the steps) and one yaml block (the plan)"
    steps = [s.strip() for s in re.split(r"^(?=# \d+\. )", bash[0], flags=re.M) if s.strip()]
    assert len(steps) == 5 and all(re.search(r"^(rollwise|cat) ", s, re.M) for s in steps), steps
    return steps, yamls[0]


def commands(step: str) -> list[list[str]]:
    """The step's commands as argument lists (comments dropped, continuation lines joined)."""
    out = []
    for line in step.replace("\\\n", " ").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(shlex.split(line))
    return out


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def setting(argv: list[str], key: str) -> str:
    """The value of `--set KEY=VALUE` in a command."""
    vals = [v.split("=", 1)[1] for f, v in zip(argv, argv[1:]) if f == "--set" and v.startswith(key + "=")]
    assert len(vals) == 1, f"--set {key}= given {len(vals)} times in {argv}"
    return vals[0]


def run_step(step: str, cwd: Path, env: dict) -> tuple[str, str]:
    """Run one step's text in bash as the page gives it: (its stdout, stdout and stderr together)."""
    rollwise = f"rollwise() {{ {shlex.quote(sys.executable)} -m rollwise.cli \"$@\"; }}\nset -e\n"
    res = subprocess.run(["bash", "-c", rollwise + step], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"step failed (exit {res.returncode}):\n{step}\n---\n{out[-3000:]}"
    assert "Traceback" not in out, out[-3000:]
    return res.stdout, out


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow  # among the eleven slowest core tests (~80 s on 2 cores): marked, still run by default
def test_the_newcomer_path_in_docs_tasks_runs_as_written(tmp_path):
    pytest.importorskip("reasoning_gym")
    steps, plan_text = walkthrough()
    warm, train, dry, bench, report = steps
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
           "ROLLWISE_CACHE": str(tmp_path / "cache")}
    work = tmp_path / "work"
    work.mkdir()
    [wcmd], [tcmd], [dcmd], [bcmd], [rcmd] = map(commands, steps)

    # 1. the base, where the page says, built as the page says (its steps, not the 600 of the default)
    stdout, out = run_step(warm, work, env)
    base = work / option(wcmd, "--out")
    said = json.loads(stdout.strip().splitlines()[-1])
    assert Path(said["base"]) == Path(option(wcmd, "--out")) and said["shipped"] is False
    assert 0.0 <= said["eval_acc"] <= 1.0
    build = json.loads((base / "build.json").read_text())
    assert build["task"] == "reasoning-gym"
    assert build["warmstart"]["steps"] == int(setting(wcmd, "warmstart.steps"))
    assert build["warmstart"]["block_size"] == int(setting(wcmd, "warmstart.block_size"))
    assert (base / "model.safetensors").is_file() and (base / "report.json").is_file()

    # 2. a short run from that base: one metrics row per step, held-out evaluations at its start and end,
    # and a learning verdict that states the figures those rows hold
    assert option(tcmd, "--model") == option(wcmd, "--out")
    assert setting(tcmd, "task_options.dataset") == setting(wcmd, "task_options.dataset")
    assert setting(tcmd, "task_options.dataset_options") == setting(wcmd, "task_options.dataset_options")
    _, out = run_step(train, work, env)
    run = work / option(tcmd, "--out")
    steps_n = int(option(tcmd, "--steps"))
    rows = rows_of(run / "metrics.jsonl")
    trained = [r for r in rows if r["step"] >= 1]
    assert [r["step"] for r in trained] == list(range(1, steps_n + 1))
    assert all(0.0 <= r["reward_mean"] <= 1.0 and 0.0 <= r["zero_var_frac_gen"] <= 1.0 for r in trained)
    tokens = [r["tokens"] for r in trained]
    assert tokens == sorted(tokens) and tokens[0] > 0
    evals = {r["step"]: r["eval_acc"] for r in rows if "eval_acc" in r}
    assert 0 in evals and steps_n in evals, evals
    assert all(0.0 <= a <= 1.0 for a in evals.values())
    verdicts = re.findall(r"^verdict: (learning|not learning|worse|sharpens): held-out accuracy ([\d.]+) \(step 0\) "
                          r"-> ([\d.]+) \(step (\d+)\)", out, re.M)
    assert len(verdicts) == 1, out[-2000:]
    kind, acc0, acc1, last = verdicts[0]
    assert (float(acc0), float(acc1), int(last)) == (round(evals[0], 3), round(evals[steps_n], 3), steps_n)
    assert json.loads((run / "config.json").read_text())["model"] == option(wcmd, "--out")
    assert "warm-started for" not in out  # the page's run names the task options its base was built with
    assert f"{trained[-1]['compute']:.3e}" in out  # the compute the page says the plan's budget is sized on

    # 3. the dry run: the plan file is the page's, every arm on the step-1 base; nothing is written
    plan_file = work / option(dcmd, "--plan")
    assert option(bcmd, "--plan") == option(dcmd, "--plan")
    plan_file.write_text(plan_text)
    plan = yaml.safe_load(plan_text)
    arms = list(plan["arms"])
    assert len(arms) == 2 and plan["baseline"] in arms and plan["kind"] == "exploratory"
    assert {a["set"]["model"] for a in plan["arms"].values()} == {option(wcmd, "--out")}
    assert 0.5 <= plan["budget"]["compute_units"] / trained[-1]["compute"] <= 2  # "about as many" steps as step 2
    assert plan["task_options"]["dataset"] == setting(wcmd, "task_options.dataset")
    assert plan["task_options"]["dataset_options"] == json.loads(setting(wcmd, "task_options.dataset_options"))
    _, out = run_step(dry, work, env)
    record = work / option(bcmd, "--out")
    assert "dry run (nothing runs)" in out and all(re.search(rf"^{a}\s+{len(plan['seeds'])}\s", out, re.M) for a in arms)
    assert "decide nothing" in out  # 2 seeds: the dry run says so before anything runs
    assert not record.exists()

    # 4. the plan run: the record first (the plan's bytes and their sha256), then every arm's seeds, done
    _, out = run_step(bench, work, env)
    assert rcmd == ["cat", f"{option(bcmd, '--out')}/report.md"]
    raw = (record / "plan.yaml").read_bytes()
    assert raw == plan_text.encode()
    digest = hashlib.sha256(raw).hexdigest()
    assert (record / "plan.sha256").read_text().split()[0] == digest
    rec = json.loads((record / "plan_record.json").read_text())
    assert rec["sha256"] == digest and rec["kind"] == "exploratory"
    assert rec["task_options"]["dataset"] == plan["task_options"]["dataset"]
    for arm in arms:
        for seed in plan["seeds"]:
            [d] = (record / "arms" / arm / "runs").glob(f"*/*/seed{seed}")
            done = json.loads((d / "done.json").read_text())
            metrics = (d / "metrics.jsonl").read_bytes()
            assert done["metrics_sha256"] == hashlib.sha256(metrics).hexdigest()
            assert done["rows"] == len(rows_of(d / "metrics.jsonl")) > 1
            assert json.loads((d / "config.json").read_text())["model"] == option(wcmd, "--out")
            assert not [w for w in done["warnings"] if "warm-started for" in w]  # the plan's options fit the base
    assert "report (exploratory)" in out
    assert not list((tmp_path / "cache").glob("base-*"))  # every step read the step-1 base; none was built

    # 5. the report, as `cat` shows it: exploratory, the task and its family named, both arms, and the
    # verdict words two seeds allow
    out, _ = run_step(report, work, env)
    assert out == (record / "report.md").read_text()
    title, first = out.splitlines()[0], out.split("\n\n")[1]
    assert title == f"# Bench plan `{plan['name']}` — EXPLORATORY" and first.startswith("**EXPLORATORY results.**")
    assert f"Task `reasoning-gym` (dataset: {plan['task_options']['dataset']}" in out
    assert f"Baseline `{plan['baseline']}`" in out
    other = next(a for a in arms if a != plan["baseline"])
    assert re.search(rf"^\| {other} \| 2 \| .*\| none: 2 seeds decide nothing \|", out, re.M)
    for arm in arms:  # the ranking names every arm
        assert re.search(rf"^\| \d \| {arm} \| 2 \| ", out, re.M)
    assert "no difference shown" not in out and not re.search(r"\b(nan|inf)\b", out)
    summary = json.loads((record / "summary.json").read_text())
    assert summary["kind"] == "exploratory" and summary["prompts"] == [plan["evaluation"]["size"]]
    assert {a: (d["seeds_paired"], d["verdict"]) for a, d in summary["arms"].items()} == {
        other: (2, "none: 2 seeds decide nothing")}


def test_a_plan_arm_on_a_base_that_is_not_there_fails_the_dry_run_and_writes_nothing(tmp_path):
    """A mistyped `model` in an arm (the page's plans name the step-1 base) passed `--dry-run`, then the real
    run wrote its record into --out and failed every run: the corrected plan needed a new directory."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1",
           "ROLLWISE_CACHE": str(tmp_path / "cache")}
    plan = tmp_path / "p.yaml"
    plan.write_text("name: p\nkind: exploratory\ntask: arithmetic\ndata_seed: 0\nbaseline: grpo\n"
                    "arms:\n  grpo: {planner: uniform, set: {model: bases/my-famliy}}\n"
                    "  greso: {planner: greso, set: {model: bases/my-famliy}}\n"
                    "seeds: [0, 1]\nbudget: {compute_units: 20000, profile: gpu-h100-v1, tokens: 40000}\n"
                    "evaluation: {size: 50, primary: greedy}\nfamily: [greso]\ndecision: {alpha: 0.05}\n")
    cli = [sys.executable, "-m", "rollwise.cli", "bench", "--plan", str(plan)]
    for extra in (["--dry-run"], ["--out", str(tmp_path / "B")]):
        res = subprocess.run(cli + extra, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode != 0 and "Traceback" not in res.stderr
        assert res.stderr.strip().splitlines()[-1] == (f"rollwise: error: plan {plan}: arms.grpo: model "
                                                       "bases/my-famliy: not a checkpoint directory (no config.json)")
    assert not (tmp_path / "B").exists()


@pytest.mark.parametrize("other, key, have, want", [
    ("{planner: ar3po}", "model", "not set", "'bases/my-family'"),  # one arm left the page's model out
    ("{planner: ar3po, set: {model: bases/other}}", "model", "'bases/other'", "'bases/my-family'"),
    ("{planner: ar3po, set: {model: bases/my-family, warmstart: {steps: 30}}}", "warmstart.steps", "30", "not set"),
])
def test_every_arm_of_a_plan_starts_from_the_baselines_base(other, key, have, want):
    """An arm without the `model` the others name trained from the default base, built on the fly (600
    supervised steps), and the plan compared two bases as if it compared two methods: refused in one line."""
    from rollwise.bench.plan import PlanError, parse_plan

    _, plan_text = walkthrough()
    parse_plan(plan_text)  # the page's plan: both arms on the step-1 base
    line = next(x for x in plan_text.splitlines() if x.strip().startswith("ar3po:"))
    bad = plan_text.replace(line, line.split(":", 1)[0] + ": " + other)
    with pytest.raises(PlanError) as e:
        parse_plan(bad, "plan P")
    assert str(e.value) == (f"plan P: arms.ar3po: set: {key} is {have} but {want} in the baseline 'grpo': every arm "
                            "must start from the same base (the same model and warmstart settings), or the plan "
                            "compares bases")


def test_a_run_on_a_base_built_for_other_task_options_is_warned(tmp_path):
    """Step 2 repeats step 1's task options; one left out trained a base fitted to other prompts (or one
    warm-started on this run's held-out prompts) with no word, or failed on the context with no cause."""
    from rollwise.policy.warmstart import SHIPPED, foreign_base
    from rollwise.tasks.arithmetic import ArithmeticTask

    shipped = SHIPPED / "arithmetic"
    assert foreign_base(shipped, ArithmeticTask()) is None
    assert foreign_base(shipped, ArithmeticTask(pool_size=300)) is None  # the pool does not shape the base
    note = foreign_base(shipped, ArithmeticTask(heldout_size=40))
    assert note.startswith(f"model {shipped} was warm-started for task 'arithmetic' [0, 1000, ")
    assert "not for this run's 'arithmetic' [0, 40, " in note and note.endswith(
        ": pass the task options it was built with (or build a base for these)")
    (tmp_path / "config.json").write_text("{}")  # a model rollwise did not build: nothing to compare
    assert foreign_base(tmp_path, ArithmeticTask(heldout_size=40)) is None
