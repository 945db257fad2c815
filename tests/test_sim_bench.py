"""`rollwise bench --engine sim`, the profiles, and the calibration machinery."""
import json

import numpy as np
import pytest

from rollwise.bench.runner import BenchConfig, run_all, run_dir
from rollwise.cli import main as cli_main
from rollwise.sim import calibrate as cal
from rollwise.sim.bench import budget_rows, sim_config
from rollwise.sim.population import Population, PopulationConfig
from rollwise.sim.profiles import profile_configs
from rollwise.sim.runner import Simulator


def test_greedy_accuracy_is_the_share_of_heldout_prompts_above_the_threshold():
    pop = Population(100, PopulationConfig(clusters=1, cluster_sd=0.0, heldout=5), seed=0)
    pop.held_difficulty = np.array([-2.0, -0.5, 0.5, 1.0, 3.0])  # z = -d at G = s = 0
    assert pop.heldout_acc(greedy=True) == pytest.approx(2 / 5)  # p > 1/2 <=> z > 0: d = -2, -0.5
    pop.cfg.greedy_threshold = 0.2  # logit(0.2) = -1.386: d = 0.5 and d = 1.0 now count too
    assert pop.heldout_acc(greedy=True) == pytest.approx(4 / 5)
    p = 1 / (1 + np.exp(pop.held_difficulty))
    assert pop.heldout_acc() == pytest.approx(p.mean())


def test_bench_seeds_share_the_population_and_differ_in_sampling():
    a, b = (Simulator(sim_config("uniform", s, 300)) for s in (0, 1))
    assert np.array_equal(a.pop.difficulty, b.pop.difficulty) and np.array_equal(a.pop.s0, b.pop.s0)
    ra, rb = budget_rows(a, 3000, 1), budget_rows(b, 3000, 1)
    assert [r["reward_mean"] for r in ra[1:]] != [r["reward_mean"] for r in rb[1:]]
    again = budget_rows(Simulator(sim_config("uniform", 0, 300)), 3000, 1)
    assert again == ra  # reproducible by seed


def test_budget_rows_stop_at_the_budget_and_carry_the_loops_fields():
    rows = budget_rows(Simulator(sim_config("greso", 0, 300)), 5000, eval_every=2)
    assert rows[0] == {"step": 0, "tokens": 0, "eval_acc": rows[0]["eval_acc"]}
    assert rows[-2]["tokens"] < 5000 <= rows[-1]["tokens"] and "eval_acc" in rows[-1]
    assert all(("eval_acc" in r) == (r["step"] % 2 == 0 or r is rows[-1]) for r in rows[1:])
    # the bench's cadence: the first step after each multiple of eval_tokens generated tokens
    rows = budget_rows(Simulator(sim_config("greso", 0, 300)), 20_000, eval_tokens=3000)
    due = [r["step"] for a, r in zip(rows, rows[1:]) if r["tokens"] // 3000 > a["tokens"] // 3000 or r is rows[-1]]
    assert [r["step"] for r in rows[1:] if "eval_acc" in r] == due and 5 <= len(due) < len(rows) - 1
    for key in ("zero_var_frac_gen", "zero_var_frac", "batch_groups", "reward_mean", "zv_revisits",
                "tokens_train", "tokens_discarded", "wall_s"):
        assert key in rows[-1], key


def test_a_planner_that_stops_spending_is_cut_off_not_looped_forever():
    # a policy that solves nothing: the oracle finds no prompt with 0 < p < 1 and trains on nothing
    cfg = sim_config("oracle", 0, 300, overrides={"population": {"skill0": -30.0}})
    rows = budget_rows(Simulator(cfg), 40_000, 5)
    assert rows[-1]["stalled"] and rows[-1]["tokens"] == 0 and len(rows) == 51


def test_bench_engine_sim_end_to_end_with_skip_and_resume(tmp_path, capsys):
    out = tmp_path / "b"
    argv = ["bench", "--engine", "sim", "--planners", "greso,hive", "--seeds", "2", "--budget", "6000",
            "--out", str(out)]
    assert cli_main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine"] == "sim"
    planners = summary["mixes"]["default"]["planners"]
    assert set(planners) == {"uniform", "greso"} and planners["uniform"]["ratio"] == pytest.approx(1.0)
    report = (out / "report.md").read_text()
    assert "hive needs the policy itself" in report and "population simulator" in report
    assert "Command: `rollwise bench --engine sim --planners greso,hive --seeds 2" in report  # as given
    cfg = BenchConfig(out=str(out), planners=["uniform", "greso"], seeds=2, budget_tokens=6000, engine="sim")
    mtime = (run_dir(cfg, "default", "greso", 1) / "metrics.jsonl").stat().st_mtime_ns
    assert cli_main(argv) == 0  # resume: finished runs are not redone
    assert (run_dir(cfg, "default", "greso", 1) / "metrics.jsonl").stat().st_mtime_ns == mtime
    assert "6 runs already finished, 0 to go" in capsys.readouterr().out  # hive's skips count as finished


def test_bench_engine_sim_refuses_what_it_cannot_mean(tmp_path):
    with pytest.raises(ValueError, match="calibrated on the 'default' mix"):
        run_all(BenchConfig(out=str(tmp_path), planners=["uniform"], mixes=["hard"], seeds=1, engine="sim"))
    with pytest.raises(ValueError, match="learner.lr has no meaning in the simulator"):
        run_all(BenchConfig(out=str(tmp_path), planners=["uniform"], seeds=1, engine="sim",
                            extra={"learner.lr": 1e-3}))
    with pytest.raises(ValueError, match="unknown sim profile 'nope'"):
        profile_configs("nope")
    with pytest.raises(ValueError, match="unknown parameter 'diff'"):
        profile_configs("tiny", {"population": {"diff": 1.0}})


def _rows(zv, reward, revisits, stayed, evals):
    rows = [{"step": 0, "tokens": 0, "eval_acc": evals[0]}]
    for i, (z, r) in enumerate(zip(zv, reward), start=1):
        row = {"step": i, "tokens": 100 * i, "step_tokens": 100, "zero_var_frac_gen": z, "reward_mean": r,
               "zv_revisits": revisits[i - 1], "zv_revisits_stayed": stayed[i - 1]}
        if i % 2 == 0:
            row["eval_acc"] = evals[i // 2]
        rows.append(row)
    return rows


def test_calibration_figures_bin_pool_and_align_by_hand():
    proto = cal.Protocol(eval_every=2, bins=2)
    f = cal.figures(_rows([0.5, 0.3, 0.2, 0.4], [0.1, 0.2, 0.3, 0.4], [0, 2, 4, 4], [0, 1, 3, 2],
                          [0.40, 0.45, 0.50]), proto)
    assert f["eval"] == {0: 0.40, 2: 0.45, 4: 0.50}
    assert f["zv"] == pytest.approx([0.4, 0.3]) and f["reward"] == pytest.approx([0.15, 0.35])
    assert f["persist"] == pytest.approx(6 / 10) and f["tokens"] == 100
    g = dict(f, eval={0: 0.42, 2: 0.47, 4: 0.50}, persist=None)  # a run that did not log persistence
    agg = cal.aggregate([f, g])
    assert agg["eval"]["mean"] == pytest.approx([0.41, 0.46, 0.50])
    assert agg["eval"]["se"][0] == pytest.approx(0.01)  # sd 0.01414 / sqrt(2)
    assert agg["eval"]["se"][2] == cal.SE_FLOOR["eval"]  # identical runs: floored, not zero
    assert agg["persist"]["mean"] == pytest.approx([0.6])  # from the run that logged it
    err, parts = cal.error(agg, agg)
    assert err == 0 and set(parts) == {"eval", "zv", "reward", "persist", "tokens"}
    shifted = json.loads(json.dumps(agg))
    shifted["zv"]["mean"] = [m + 2 * s for m, s in zip(agg["zv"]["mean"], agg["zv"]["se"])]
    assert cal.error(agg, shifted)[1]["zv"] == pytest.approx(4.0)  # two standard errors off: 2^2


def test_calibration_error_prefers_the_parameters_that_made_the_data():
    proto = cal.Protocol(budget_tokens=15_000)
    true = {("population", "diff_sd"): 2.0, ("population", "median_len"): 4.5,
            ("dynamics", "eta_cluster"): 0.5, ("dynamics", "eta_prompt"): 2.0}
    real = cal.simulate(true, proto, [0, 1, 2])
    same = cal.error(real, cal.simulate(true, proto, [10, 11, 12]))[0]
    off = cal.error(real, cal.simulate({**true, ("population", "diff_sd"): 4.0}, proto, [10, 11, 12]))[0]
    assert same < off
