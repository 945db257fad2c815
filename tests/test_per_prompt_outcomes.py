"""Per-prompt evaluation outcomes and the two-way (seeds x prompts) bootstrap (issue 47, item 2)."""
import json

import numpy as np
import pytest

from rollwise.bench import stats
from rollwise.run.config import load_config
from rollwise.run.evaluate import OUTCOMES, unpack_outcomes
from rollwise.run.loop import Trainer

from conftest import SMALL


def test_a_run_records_every_evaluations_per_prompt_results_and_they_agree_with_its_accuracy(tmp_path, small_policy):
    cfg = load_config(None, {**SMALL, "out": str(tmp_path / "run"), "steps": 2, "eval_samples": 2})
    rows = Trainer(cfg).run()
    lines = [json.loads(x) for x in (tmp_path / "run" / OUTCOMES).read_text().splitlines()]
    evals = [r for r in rows if "eval_acc" in r]
    assert [x["step"] for x in lines] == [r["step"] for r in evals]
    for line, row in zip(lines, evals):
        got = unpack_outcomes({k: v for k, v in line.items() if k not in ("step", "prompts")}, line["prompts"])
        assert got["greedy"].mean() == pytest.approx(row["eval_acc"])
        assert got["sampled@2"].mean() == pytest.approx(row["eval_sampled_acc@2"])


def test_auc_weights_reproduce_the_area():
    t, a = np.array([0.0, 2.0, 5.0, 9.0]), np.array([0.1, 0.4, 0.2, 0.7])
    assert stats.auc_weights(t, 8.0) @ a == pytest.approx(stats.area_under_curve(t, a, 8.0))


def test_the_two_way_interval_is_wider_than_the_seed_interval_when_prompts_disagree():
    # every seed gains on the same 2 of 10 prompts: seeds agree exactly, so only resampling prompts
    # shows that the gain rests on two prompts
    D = np.zeros((8, 10))
    D[:, :2] = 1.0
    seeds_only = stats.paired_difference(np.zeros(8), D.mean(axis=1), np.random.default_rng(0))
    both = stats.two_way_bootstrap(D, np.random.default_rng(0), samples=2000)
    assert seeds_only["lo"] == seeds_only["hi"] == pytest.approx(0.2)
    assert both["diff"] == pytest.approx(0.2) and both["lo"] <= 0.0 + 1e-12 < 0.2 < both["hi"]
    with pytest.raises(ValueError):
        stats.two_way_bootstrap(np.zeros(3), np.random.default_rng(0))
