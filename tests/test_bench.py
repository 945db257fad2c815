import json
import sys

import numpy as np
import pytest

from rollwise.bench.report import markdown_table, median_ratio, run_figures, table_cells, write_report
from rollwise.bench.runner import BenchConfig, progress_line, run_command, run_dir


def curve(accs, tokens_per_step=100, zv=0.5):
    rows = [{"step": 0, "tokens": 0, "eval_acc": accs[0]}]
    for i, a in enumerate(accs[1:], 1):
        rows.append({"step": i, "tokens": i * tokens_per_step, "eval_acc": a, "batch_groups": 4,
                     "zero_var_frac": zv, "zero_var_frac_gen": zv, "mean_abs_adv": 0.5, "wall_s": float(i),
                     "tokens_train": i * tokens_per_step})
    return rows


def test_run_figures_read_at_the_exact_budget():
    rows = curve([0.4, 0.5, 0.7, 0.6])  # evals at 0, 100, 200, 300 tokens
    f = run_figures(rows, 0.65, budget=250)
    # 4 groups per step, half zero-variance -> 2 useful groups per step; 300 tokens / 6 useful groups
    assert f["tokens_per_useful_group"] == 300 / 6 and f["base_acc"] == 0.4
    assert f["final_acc"] == pytest.approx(0.65)  # halfway between 0.7 (200) and 0.6 (300)
    # trapezoids to 250: 45 + 60 + (0.7 + 0.65) / 2 * 50 = 138.75
    assert f["auc"] == pytest.approx(138.75 / 250) and f["covers_budget"]
    # smoothed (3 evals): (0, 0.4), (50, 0.45), (100, 0.533), (200, 0.6), held: never 0.65
    assert f["tokens_to_target"] == np.inf
    assert not run_figures(rows, 0.5, budget=400)["covers_budget"]
    assert run_figures(rows, 0.5)["final_acc"] == 0.6  # no budget: the last eval


def test_median_ratio_kept_for_sim_rank():
    assert median_ratio(np.array([1000.0, 1100, 900]), np.array([500.0, 550, 450])) == 2.0
    assert median_ratio(np.array([1000.0, 1100]), np.array([np.inf, np.inf])) == 0.0
    assert median_ratio(np.array([1000.0, np.inf]), np.array([500.0, np.inf])) == 2.0  # lower median


def write_runs(cfg, curves):
    for p, (accs, tps) in curves.items():
        for s in range(cfg.seed_start, cfg.seed_start + cfg.seeds):
            d = run_dir(cfg, "default", p, s)
            d.mkdir(parents=True)
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve(accs, tps)))


def html_rows(page: str) -> list[tuple[int, int]]:
    """(header cells, data cells) of each table row of the first table."""
    table = page[page.index("<table>"): page.index("</table>")]
    return [(r.count("<th>"), r.count("<td>")) for r in table.split("<tr>")[1:]]


def test_summary_and_report_from_run_dirs(tmp_path):
    cfg = BenchConfig(out=str(tmp_path), planners=["uniform", "fast"], seeds=2, budget_tokens=300)
    # same accuracies per step; fast spends 50 tokens a step, GRPO 100 -> evals at 0..150 vs 0..300 tokens
    write_runs(cfg, {"uniform": ([0.4, 0.5, 0.6, 0.7], 100), "fast": ([0.4, 0.5, 0.6, 0.7], 50)})
    summary = write_report(cfg, "rollwise bench --test")
    m = summary["mixes"]["default"]
    # GRPO's smoothed curve (3 evals) ends at (200, 0.6) and is held: the target is 0.6, reached at 200
    # tokens; fast's smoothed curve reaches 0.6 at 100 tokens -> ratio 2 in every resample
    assert m["target_acc"] == pytest.approx(0.6) and m["target_ci"] == pytest.approx([0.6, 0.6])
    f, u = m["planners"]["fast"], m["planners"]["uniform"]
    assert f["ratio"] == pytest.approx(2.0) and (f["ci_low"], f["ci_high"]) == pytest.approx((2.0, 2.0))
    assert u["ratio"] == 1.0 and f["reach_frac"] == 1.0 and f["reached"] == 2
    # mean accuracy over 300 tokens: GRPO 0.4 -> 0.7 linearly = 0.55; fast 0.55 over 0-150, then 0.7 held:
    # (82.5 + 105) / 300 = 0.625
    assert u["auc"] == pytest.approx(0.55) and f["auc"] == pytest.approx(0.625)
    assert f["auc_diff"] == pytest.approx({"diff": 0.075, "lo": 0.075, "hi": 0.075})
    # at 75, 150, 225, 300 tokens: GRPO 0.475, 0.55, 0.625, 0.7; fast 0.55, 0.7, 0.7, 0.7
    assert [f["acc_diff"][k]["diff"] for k in ("25", "50", "75", "100")] == pytest.approx([0.075, 0.15, 0.075, 0])
    assert f["verdict"] == "too few seeds" and f["held_runs"] == 2 and u["held_runs"] == 0
    for name in ("summary.json", "report.md", "report.html", "plot_default.png", "plot_default_diff.png",
                 "plot_default_waste.png"):
        assert (tmp_path / name).exists()
    report = (tmp_path / "report.md").read_text()
    assert "| fast | 0.625 | +0.075 [+0.075, +0.075] | too few seeds |" in report
    assert "2 seeds decide nothing" in report and "held to the budget): fast 2" in report
    assert "| planner | train |" in report and "| fast | 150 |" in report  # tokens by purpose: 3 steps x 50
    page = (tmp_path / "report.html").read_text()
    rows = html_rows(page)
    assert rows[0][0] == 12 and all(td == 12 for _, td in rows[1:])  # the escaped |A| is one cell
    assert "mean |A|" in page and "<code>rollwise bench --test</code>" in page and "`" not in page


def test_verdicts_with_enough_seeds(tmp_path):
    cfg = BenchConfig(out=str(tmp_path), planners=["uniform", "fast", "slow"], seeds=5, budget_tokens=300)
    write_runs(cfg, {"uniform": ([0.4, 0.5, 0.6, 0.7], 100), "fast": ([0.4, 0.5, 0.6, 0.7], 50),
                     "slow": ([0.4, 0.5, 0.6, 0.7], 200)})
    summary = write_report(cfg, "rollwise bench --test")
    m = summary["mixes"]["default"]["planners"]
    assert (m["fast"]["verdict"], m["slow"]["verdict"], m["uniform"]["verdict"]) == ("higher", "lower", "baseline")
    report = (tmp_path / "report.md").read_text()
    assert "Higher, interval above 0: fast. Lower, interval below 0: slow." in report
    # slow's curve reaches 0.55 at 300 tokens and never the target 0.6
    assert m["slow"]["ratio"] == 0.0 and m["slow"]["reach_frac"] == 0.0 and "| not reached |" in report


def test_seed_start_reads_and_runs_only_its_seeds(tmp_path):
    """A tuning bench on seeds 100-101 reads those runs, not seeds 0-1 of the same directory, and starts
    its trainers with those seeds."""
    cfg = BenchConfig(out=str(tmp_path), planners=["uniform", "fast"], seeds=2, seed_start=100, budget_tokens=300)
    write_runs(cfg, {"uniform": ([0.4, 0.5, 0.6, 0.7], 100), "fast": ([0.4, 0.5, 0.6, 0.7], 50)})
    decoy = BenchConfig(out=str(tmp_path), planners=["fast"], seeds=2, budget_tokens=300)
    write_runs(decoy, {"fast": ([0.4, 0.1, 0.1, 0.1], 100)})  # seeds 0-1: must not be read
    summary = write_report(cfg, "rollwise bench --test")
    assert summary["seed_start"] == 100
    assert summary["mixes"]["default"]["planners"]["fast"]["auc"] == pytest.approx(0.625)
    assert "2 seeds (seeds 100–101)" in (tmp_path / "report.md").read_text()
    cmd = run_command(cfg, "default", "fast", 101)
    assert cmd[cmd.index("--set", cmd.index("--out")) + 1:].count("seed=101") == 1
    assert str(run_dir(cfg, "default", "fast", 101)).endswith("seed101")
    with pytest.raises(ValueError, match="--seed-start must be >= 0"):
        from rollwise.bench.runner import run_all
        run_all(BenchConfig(out=str(tmp_path / "neg"), planners=["uniform"], seeds=1, seed_start=-1))


def test_table_cells_split_on_unescaped_pipes_only():
    assert table_cells("| a | mean \\|A\\| | b |") == ["a", "mean |A|", "b"]


def test_run_command_pins_everything_but_the_planner(tmp_path):
    cfg = BenchConfig(out=str(tmp_path), budget_tokens=1234, extra={"learner.lr": 0.5})
    a, b = run_command(cfg, "default", "uniform", 0), run_command(cfg, "default", "greso+ar3po", 0)
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    assert all("greso" in y for _, y in diff) and len(a) == len(b)
    assert 'budget_tokens=1234' in a and 'learner.lr=0.5' in a


def test_progress_line_reads_a_running_runs_metrics(tmp_path):
    cfg = BenchConfig(out=str(tmp_path), budget_tokens=40_000)
    key = ("default", "uniform", 0)
    assert progress_line(cfg, key) is None  # not started
    d = run_dir(cfg, *key)
    d.mkdir(parents=True)
    rows = [{"step": 0, "tokens": 0, "eval_acc": 0.473}, {"step": 5, "tokens": 6100, "eval_acc": 0.51},
            {"step": 12, "tokens": 14_210}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 13, "tok')
    assert progress_line(cfg, key) == "bench: default/uniform/seed0 step 12 tokens 14.2k/40k acc 0.510"
    # a plan's compute-ended run says its arm and its compute against the budget
    arm = BenchConfig(out=str(tmp_path / "arms" / "grpo-n4"), budget_compute=950_000)
    d = run_dir(arm, *key)
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text(json.dumps({"step": 7, "tokens": 70_000, "compute": 131_400.5}) + "\n")
    assert progress_line(arm, key) == "bench: grpo-n4/seed0 step 7 compute 131k/950k"


def test_markdown_table_still_reads_a_summary_written_before_the_new_figures():
    old = {"ratio": 1.0, "ci_low": 0.0, "ci_high": float("inf"), "reached": 4, "runs": 5, "final_acc": 0.528,
           "final_acc_sd": 0.011, "tokens_per_useful_group": 63, "zero_var_frac_gen": 0.38, "mean_abs_adv": 0.494,
           "wall_ratio": 1.0}
    table = markdown_table({"seeds": 5, "mixes": {"default": {"target_acc": 0.527, "planners": {"uniform": old}}}},
                           "default")
    assert "Target held-out accuracy 0.527." in table
    # GRPO's own row: 1.00 by definition (issue 48: it read "inf" when the target sat at its base)
    assert "| uniform | — | — | — | — | 1.00 (by definition) | by definition (4/5 single runs) | 0.528 ± 0.011 |" in table
    assert {len(table_cells(x)) for x in table.splitlines() if x.startswith("|")} == {12}


def test_run_all_reports_progress_while_runs_go(tmp_path, monkeypatch):
    from rollwise.bench import runner

    # a stand-in for `rollwise train`: writes two metrics rows, a second apart
    script = ("import json, sys, time\n"
              "f = open(sys.argv[1], 'a')\n"
              "for row in ({'step': 0, 'tokens': 0, 'eval_acc': 0.473}, {'step': 3, 'tokens': 2500}):\n"
              "    f.write(json.dumps(row) + '\\n'); f.flush(); time.sleep(1.0)\n")
    monkeypatch.setattr(runner, "_ensure_base", lambda cfg, log: None)
    monkeypatch.setattr(runner, "run_command", lambda cfg, *key: [
        sys.executable, "-c", script, str(run_dir(cfg, *key) / "metrics.jsonl")])
    monkeypatch.setattr(runner, "PROGRESS_EVERY_S", 0.5)
    logs = []
    runner.run_all(BenchConfig(out=str(tmp_path), planners=["uniform"], seeds=1, budget_tokens=4000), log=logs.append)
    assert "bench: default/uniform/seed0 step 3 tokens 2.5k/4k acc 0.473" in logs
    assert logs[-1].startswith("bench: done default/uniform/seed0")


def test_finished_runs_are_reused_only_with_the_same_settings(tmp_path, monkeypatch):
    """A rerun bench reuses a finished run made with the very same settings, and refuses (never
    overwrites) a run dir made with other ones, e.g. another budget."""
    from rollwise.bench import runner

    started = []
    monkeypatch.setattr(runner, "_ensure_base", lambda cfg, log: None)
    monkeypatch.setattr(runner, "run_command", lambda cfg, *key: started.append(key) or [sys.executable, "-c", ""])
    cfg = BenchConfig(out=str(tmp_path), planners=["uniform"], seeds=1, budget_tokens=5000)
    runner.run_all(cfg, log=lambda m: None)
    runner.run_all(cfg, log=lambda m: None)
    assert started == [("default", "uniform", 0)]  # the second bench found it finished
    with pytest.raises(ValueError, match="other settings.*budget_tokens.*eval_every_tokens"):
        runner.run_all(BenchConfig(out=str(tmp_path), planners=["uniform"], seeds=1, budget_tokens=20_000),
                       log=lambda m: None)
    with pytest.raises(ValueError, match="--jobs must be >= 1"):
        runner.run_all(BenchConfig(out=str(tmp_path / "j"), jobs=0), log=lambda m: None)
    with pytest.raises(ValueError, match="no planner named 'nope'"):  # before any run starts
        runner.run_all(BenchConfig(out=str(tmp_path / "p"), planners=["uniform", "nope"]), log=lambda m: None)
    assert started == [("default", "uniform", 0)]


def test_planner_options_reach_only_the_planners_that_have_the_component(tmp_path):
    from rollwise.bench.runner import run_settings

    cfg = BenchConfig(out=str(tmp_path), extra={"planner_options": {"pilot-commit": {"n_pilot": 2}}})
    assert "planner_options" not in run_settings(cfg, "default", "uniform", 0)
    assert run_settings(cfg, "default", "pilot-commit", 0)["planner_options"] == {"pilot-commit": {"n_pilot": 2}}



def test_dotted_planner_options_reach_only_their_planners_and_a_stray_one_is_refused(tmp_path):
    """`--set planner_options.treepo.segment_tokens=16` (as the CLI stores it, a dotted key) skips GRPO's
    runs; an option for a component no planner of the bench has is an error before any run starts."""
    from rollwise.bench.runner import run_all, run_settings

    cfg = BenchConfig(out=str(tmp_path / "a"), planners=["uniform", "ar3po+treepo"],
                      extra={"planner_options.treepo.segment_tokens": 16, "learner.lr": 1e-4})
    assert run_settings(cfg, "default", "uniform", 0)["learner.lr"] == 1e-4
    assert "planner_options.treepo.segment_tokens" not in run_settings(cfg, "default", "uniform", 0)
    assert run_settings(cfg, "default", "ar3po+treepo", 0)["planner_options.treepo.segment_tokens"] == 16
    stray = BenchConfig(out=str(tmp_path / "b"), planners=["uniform", "dapo"],
                        extra={"planner_options.treepo.segment_tokens": 16})
    with pytest.raises(ValueError, match="treepo is in none of the bench's planners"):
        run_all(stray, log=lambda m: None)
    assert not (tmp_path / "b" / "runs").exists()


def test_a_trainers_warnings_reach_the_bench(tmp_path):
    """The bench reads each run's `warning:` lines from its own part of train.log (a resumed bench appends),
    so a run whose reward failed on every call is said, not reported as a plain result."""
    from rollwise.bench.runner import trainer_warnings

    log = tmp_path / "train.log"
    log.write_text("warning: step 1: the reward function failed on 8 of 8 calls\nold run\n")
    start = log.stat().st_size
    with open(log, "a") as f:
        f.write("resuming\nwarning: step 3: the reward function failed on 8 of 8 calls\nstep 3 ok\n"
                "warning: step 3: the reward function failed on 8 of 8 calls\nwarning: no variance\n")
    assert trainer_warnings(log, start) == ["warning: step 3: the reward function failed on 8 of 8 calls",
                                            "warning: no variance"]
    assert trainer_warnings(log)[0].startswith("warning: step 1") and trainer_warnings(tmp_path / "none") == []


def test_a_finished_run_records_its_cpu_seconds_apart_from_wall_seconds(tmp_path, monkeypatch):
    """done.json keeps the run process's CPU seconds (Bench 3.0's envelope is in core-hours): a stand-in
    that burns ~0.4 s of CPU then sleeps 0.6 s records about 0.4 CPU seconds and about 1 s of wall."""
    from rollwise.bench import runner

    script = ("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4:\n    pass\n"
              "time.sleep(0.6)\n")
    monkeypatch.setattr(runner, "_ensure_base", lambda cfg, log: None)
    monkeypatch.setattr(runner, "run_command", lambda cfg, *key: [sys.executable, "-c", script])
    runner.run_all(BenchConfig(out=str(tmp_path), planners=["uniform"], seeds=1, budget_tokens=4000), log=lambda m: None)
    done = json.loads((run_dir(BenchConfig(out=str(tmp_path)), "default", "uniform", 0) / "done.json").read_text())
    assert 0.35 <= done["cpu_seconds"] < 0.9 and done["seconds"] >= 0.95
    # a resumed run adds the CPU of its stopped parts (kept in cpu_partial.json as the bench stops them)
    cfg = BenchConfig(out=str(tmp_path / "r"), planners=["uniform"], seeds=1, budget_tokens=4000)
    d = run_dir(cfg, "default", "uniform", 0)
    d.mkdir(parents=True)
    (d / "bench.json").write_text(json.dumps({"settings": runner.run_settings(cfg, "default", "uniform", 0)}))
    runner.add_partial_cpu(d, 2.0)
    runner.add_partial_cpu(d, 3.0)
    runner.run_all(cfg, log=lambda m: None)
    assert 5.35 <= json.loads((d / "done.json").read_text())["cpu_seconds"] < 5.9
    # a failing run is reaped the same way and is not marked done
    monkeypatch.setattr(runner, "run_command", lambda cfg, *key: [sys.executable, "-c", "raise SystemExit(3)"])
    with pytest.raises(runner.BenchFailed):
        runner.run_all(BenchConfig(out=str(tmp_path / "f"), planners=["uniform"], seeds=1, budget_tokens=4000),
                       log=lambda m: None)
