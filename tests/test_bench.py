import json

import numpy as np

from rollwise.bench.report import bootstrap_ratio, run_figures, summarize, tokens_to_target, write_report
from rollwise.bench.runner import BenchConfig, run_command, run_dir


def curve(accs, tokens_per_step=100, zv=0.5):
    rows = [{"step": 0, "tokens": 0, "eval_acc": accs[0]}]
    for i, a in enumerate(accs[1:], 1):
        rows.append({"step": i, "tokens": i * tokens_per_step, "eval_acc": a, "batch_groups": 4,
                     "zero_var_frac": zv, "zero_var_frac_gen": zv, "mean_abs_adv": 0.5, "wall_s": float(i),
                     "tokens_train": i * tokens_per_step})
    return rows


def test_tokens_to_target_is_the_first_crossing_after_step_0():
    rows = curve([0.9, 0.4, 0.5, 0.7, 0.6])  # step 0 above target must not count
    assert tokens_to_target(rows, 0.6) == 300 and tokens_to_target(rows, 0.95) == float("inf")
    f = run_figures(rows, 0.6)
    # 4 groups per step, half zero-variance -> 2 useful groups per step, 400 tokens -> 8 useful groups
    assert f["tokens_per_useful_group"] == 400 / 8 and f["final_acc"] == 0.6 and f["base_acc"] == 0.9


def test_bootstrap_ratio_point_and_interval():
    rng = np.random.default_rng(0)
    base, half = np.array([1000.0, 1100, 900]), np.array([500.0, 550, 450])
    r, lo, hi = bootstrap_ratio(base, half, rng)
    assert r == 2.0 and lo <= 2.0 <= hi and lo > 1.0
    r, lo, hi = bootstrap_ratio(base, np.array([np.inf, np.inf, 500.0]), rng)
    assert r == 0.0  # the median run never reached the target
    # two seeds, one unreached: the lower median is the reached run, not inf
    r, _, _ = bootstrap_ratio(np.array([1000.0, np.inf]), np.array([500.0, np.inf]), rng)
    assert r == 2.0


def test_summary_and_report_from_run_dirs(tmp_path):
    cfg = BenchConfig(out=str(tmp_path), planners=["uniform", "fast"], seeds=2)
    for s in range(2):
        for p, tps in (("uniform", 100), ("fast", 50)):
            d = run_dir(cfg, "default", p, s)
            d.mkdir(parents=True)
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in curve([0.4, 0.5, 0.6, 0.7], tps)))
    summary = write_report(cfg, "rollwise bench --test")
    m = summary["mixes"]["default"]
    assert m["target_acc"] == 0.7
    assert m["planners"]["fast"]["ratio"] == 2.0 and m["planners"]["uniform"]["ratio"] == 1.0
    for f in ("summary.json", "report.md", "report.html", "plot_default.png"):
        assert (tmp_path / f).exists()
    report = (tmp_path / "report.md").read_text()
    assert "| fast | 2.00" in report
    assert "| planner | train |" in report and "| fast | 150 |" in report  # tokens by purpose: 3 steps x 50


def test_run_command_pins_everything_but_the_planner(tmp_path):
    cfg = BenchConfig(out=str(tmp_path), budget_tokens=1234, extra={"learner.lr": 0.5})
    a, b = run_command(cfg, "default", "uniform", 0), run_command(cfg, "default", "greso+ar3po", 0)
    diff = [(x, y) for x, y in zip(a, b) if x != y]
    assert all("greso" in y for _, y in diff) and len(a) == len(b)
    assert 'budget_tokens=1234' in a and 'learner.lr=0.5' in a
