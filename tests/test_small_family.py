"""The small-family guard (issue 48, item 5): a warm start whose rows are most of the train pool leaves the pool
mostly solved at the first step; the run says so with both figures and the option that keeps them apart."""
import json

import pytest

from rollwise.policy.warmstart import memorised_pool, pool_overlap
from rollwise.run.config import load_config

from test_adversarial import one_thread  # noqa: F401  (an autouse fixture)


def test_the_warning_reads_both_figures_and_offers_the_option():
    """The issue's family: 57 of 100 groups all right at the start; say 285 of 297 pool prompts are warm-start rows."""
    assert memorised_pool((285, 297), 57, 100, "task_options.sft_disjoint=true") == (
        "warning: 57% of the first step's groups were all right, and 285 of the 297 train-pool prompts (96%) are "
        "warm-start rows: the base has memorised most of the pool it trains on, so the run has little to learn "
        "there and its held-out figure is what to read; task_options.sft_disjoint=true keeps them apart")
    assert memorised_pool((285, 297), 49, 100, "x") is None  # the pool is not mostly solved
    assert memorised_pool((140, 297), 90, 100, "x") is None  # solved, but not from the warm start's rows (47%)
    assert memorised_pool(None, 90, 100, "x") is None  # a task that generates its warm-start rows afresh


def test_reasoning_gym_sft_disjoint_keeps_warm_start_rows_out_of_the_pool():
    pytest.importorskip("reasoning_gym", reason="the reasoning-gym extra is not installed")
    from rollwise.tasks.rgym import ReasoningGymTask

    small = dict(dataset="gcd", dataset_options={"min_value": 1, "max_value": 12}, pool_size=40, validation_size=5,
                 test_size=5, sft_size=40)
    shared, apart = ReasoningGymTask(**small), ReasoningGymTask(**small, sft_disjoint=True)
    assert pool_overlap(shared) == (16, 40) and pool_overlap(apart) == (0, 40)
    assert len(shared.base_fingerprint()) == 9  # bases built before the option keep their keys
    assert apart.base_fingerprint()[-1] == {"sft_disjoint": True, "pool_size": 40}
    with pytest.raises(ValueError, match="sft_disjoint leaves no warm-start row outside the held-out sets and the "
                                         "train pool .*lower task_options.pool_size"):
        ReasoningGymTask(**{**small, "dataset_options": {"min_value": 1, "max_value": 3}, "pool_size": 200},
                         sft_disjoint=True).sft_distinct()  # a family of 9 prompts: the pool takes all it can


def test_a_file_run_warm_started_on_its_train_rows_warns_at_its_first_step(tmp_path, monkeypatch, cache_dir):
    from rollwise.run.loop import Trainer

    def jsonl(path, rows):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return str(path)

    train = jsonl(tmp_path / "t.jsonl", [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(4)])
    held = jsonl(tmp_path / "h.jsonl", [{"prompt": f"{i}+2=", "answer": str(i + 2)} for i in range(4)])
    (tmp_path / "always_right.py").write_text("def reward(response, answer):\n    return 1.0\n")
    monkeypatch.chdir(tmp_path)  # the reward module is in the current directory only
    monkeypatch.syspath_prepend(str(tmp_path))
    said = []
    cfg = load_config(None, {"task": "file", "task_options": {"train_path": train, "heldout_path": held},
                             "warmstart": {"steps": 3}, "reward": "always_right:reward", "steps": 1, "batch_size": 4,
                             "n": 2, "max_new_tokens": 4, "eval_every": 0, "out": str(tmp_path / "run")})
    Trainer(cfg, log=said.append).run()
    assert ("warning: 100% of the first step's groups were all right, and 4 of the 4 train-pool prompts (100%) are "
            "warm-start rows") in "\n".join(said)
    assert "task_options.sft_path=FILE (warm-start rows of their own, not the train rows) keeps them apart" in said[-1] \
        or any("sft_path=FILE" in line for line in said)
