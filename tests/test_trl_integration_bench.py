"""benchmarks/trl_integration.py's bookkeeping (no TRL run, no vLLM): the interleaved run order, the learning
rate the sweep keeps, the median paired wall-clock ratio and the rendered tables."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("rw_trl_integration", ROOT / "benchmarks" / "trl_integration.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_run_order_pairs_a_seeds_runs_and_rotates_which_config_goes_first(bench):
    assert bench.run_order([0, 1], ["grpo", "x"]) == [(0, "grpo"), (0, "x"), (1, "grpo"), (1, "x")]
    assert bench.run_order([5, 6, 7], ["grpo", "x"], rotate=True) == [
        (5, "grpo"), (5, "x"), (6, "x"), (6, "grpo"), (7, "grpo"), (7, "x")]
    assert bench.run_order([0, 1, 2], ["a", "b", "c"], rotate=True) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "b"), (1, "c"), (1, "a"), (2, "c"), (2, "a"), (2, "b")]


def test_pick_lr_keeps_the_best_mean_accuracy_and_the_lower_lr_on_a_tie(bench):
    sweep = [{"lr": lr, "seed": seed, "final_acc": acc, "wall_s": wall} for lr, seed, acc, wall in [
        (1e-3, 100, 0.9, 1.0), (1e-3, 101, 0.5, 3.0), (1e-4, 100, 0.6, 1.0), (1e-4, 101, 0.7, 1.0),
        (3e-4, 100, 0.7, 1.0), (3e-4, 101, 0.6, 1.0)]]
    means = bench.lr_means(sweep)
    assert means[1e-3]["final_acc"] == pytest.approx(0.7) and means[1e-3]["wall_s"] == 2.0
    assert bench.pick_lr(sweep) == 1e-3  # 0.70 beats 0.65 twice
    sweep[0]["final_acc"] = 0.8  # now 1e-3 and 1e-4 tie at 0.65 with 3e-4: the lowest
    assert bench.pick_lr(sweep) == 1e-4
    with pytest.raises(ValueError, match="no finished run"):
        bench.pick_lr([])


def test_median_paired_ratio_pairs_by_seed(bench):
    runs = [{"config": "grpo", "seed": 0, "wall_s": 10.0}, {"config": "x", "seed": 0, "wall_s": 5.0},
            {"config": "grpo", "seed": 1, "wall_s": 10.0}, {"config": "x", "seed": 1, "wall_s": 20.0},
            {"config": "x", "seed": 2, "wall_s": 99.0},  # no grpo run on seed 2: left out
            {"config": "grpo", "seed": 3, "wall_s": 40.0}, {"config": "x", "seed": 3, "wall_s": 40.0}]
    r = bench.paired_ratio(runs)["x"]
    assert r["seeds"] == 3 and r["per_seed"] == [0.5, 2.0, 1.0] and r["ratio"] == 1.0
    assert 0.5 <= r["lo"] <= 1.0 <= r["hi"] <= 2.0
    assert bench.paired_ratio(runs, "cpu_s") == {}  # not recorded
    same = bench.median_ratio([2.0, 4.0, 8.0], [1.0, 2.0, 4.0], np.random.default_rng(0))
    assert (same["ratio"], same["lo"], same["hi"]) == (0.5, 0.5, 0.5)  # every seed halved: no spread


def test_render_shows_the_sweep_and_the_paired_ratio(bench, tmp_path):
    runs = []
    for seed, (g, x) in enumerate([(10.0, 5.0), (10.0, 20.0), (40.0, 40.0)]):
        for config, wall, acc in (("grpo", g, 0.5), ("pods+ar3po", x, 0.5 + 0.1 * seed)):
            runs.append({"config": config, "seed": seed, "lr": 3e-4, "steps": 4, "tokens": 100, "groups_rolled": 8,
                         "groups_trained": 8, "zero_variance_trained": 0, "final_acc": acc, "wall_s": wall,
                         "cpu_s": 2 * wall})
    sweep = [{"lr": lr, "seed": 100, "final_acc": acc, "wall_s": 7.0} for lr, acc in ((1e-4, 0.4), (3e-4, 0.6))]
    data = {"what": "w", "command": "c", "versions": {}, "label": "exploratory",
            "setup": {"prompts_per_step": 2, "generations": 8, "steps": 10, "tokens": 100, "pool": 8, "heldout": 4,
                      "lr": 3e-4, "vllm": "colocate"},
            "base_heldout": {"acc": 0.5}, "runs": runs, "summary": bench.summarize(runs), "paired": bench.paired(runs),
            "lr_sweep": {"seeds": [100], "picked": bench.pick_lr(sweep),
                         "means": {str(k): v for k, v in bench.lr_means(sweep).items()}},
            "paired_ratio": {k: bench.paired_ratio(runs, k) for k in ("wall_s", "cpu_s")}}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    text = bench.render(path)
    assert "picked: 0.0003" in text and "| 0.0003 | 1 | 0.600 (0.600) | 7 |" in text
    assert "| pods+ar3po | 3 | 1.00 | [" in text and "| 0.50, 2.00, 1.00 | 1.00 | [" in text
    assert "| pods+ar3po | 3 | +0.100 |" in text  # accuracy: +0.0, +0.1, +0.2 over grpo's 0.5
    assert "Learning rate 0.0003. TRL generates with vLLM (colocate mode" in text
    assert "| 20 (10, 10, 40) | 40 (20, 20, 80) |" in text  # grpo's wall and CPU seconds
    assert "| seed | first | grpo acc | grpo wall s | grpo CPU s | pods+ar3po acc |" in text
    assert "| 1 | grpo | 0.500 | 10 | 20 | 0.600 | 20 | 40 |" in text
