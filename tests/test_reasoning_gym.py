"""reasoning-gym tasks by name (tasks/rgym.py): splits from a data seed, its own verifier, the warm start."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym", reason="the reasoning-gym extra is not installed")

from rollwise.core.types import Group, Prompt, Rollout  # noqa: E402
from rollwise.tasks.reward import Scorer  # noqa: E402
from rollwise.tasks.rgym import ReasoningGymTask, stream_seed  # noqa: E402

SMALL = dict(dataset="gcd", pool_size=60, validation_size=20, test_size=20, sft_size=50)


def texts(prompts):
    return [p.text for p in prompts]


def ref(p) -> str:
    return json.loads(p.answer)["entry"]["answer"]


def test_splits_are_disjoint_seeded_and_the_heldout_ones_ignore_the_pool_size():
    task = ReasoningGymTask(**SMALL)
    train, val, test = (texts(task.split_prompts(s)) for s in ("train", "validation", "test"))
    assert (len(train), len(val), len(test)) == (60, 20, 20)
    for split in (train, val, test):
        assert len(set(split)) == len(split)  # deduplicated by prompt text
    assert not (set(train) & set(val)) and not (set(train) & set(test)) and not (set(val) & set(test))
    assert texts(task.heldout()) == val  # the validation split unless split=test
    assert texts(ReasoningGymTask(**SMALL, split="test").heldout()) == test
    again = ReasoningGymTask(**{**SMALL, "pool_size": 10})
    assert texts(again.split_prompts("validation")) == val and texts(again.split_prompts("test")) == test
    assert texts(again.train_pool()) == train[:10]  # the same stream, read for fewer
    other = ReasoningGymTask(**SMALL, data_seed=1)
    assert not set(texts(other.heldout())) & set(val)
    sft = {q for q, _, _ in task.sft_distinct()}
    assert len(sft) == 50 and not sft & (set(val) | set(test))  # no held-out prompt is a warm-start target
    assert stream_seed(0, "train") != stream_seed(0, "heldout") != stream_seed(1, "heldout")


def test_a_family_with_few_distinct_prompts_is_split_in_proportion():
    # gcd of two numbers in 1..3: 9 distinct questions
    task = ReasoningGymTask(dataset="gcd", dataset_options={"min_value": 1, "max_value": 3}, pool_size=10,
                            validation_size=6, test_size=4, sft_size=5)
    val, test, train = (texts(task.split_prompts(s)) for s in ("validation", "test", "train"))
    assert (len(val), len(test), len(train)) == (9 * 6 // 20, 9 * 4 // 20, 9 - 2 - 1)  # 10:6:4 of 9
    assert len(set(val + test + train)) == 9
    assert any("about 9 distinct prompts, split in proportion" in n for n in task.notes())
    assert any("train: 6 distinct prompts" in n for n in task.notes())


def test_dataset_options_pass_through():
    task = ReasoningGymTask(dataset="gcd", dataset_options={"min_value": 1, "max_value": 20}, **{
        k: v for k, v in SMALL.items() if k != "dataset"})
    for p in task.heldout():
        nums = json.loads(p.answer)["entry"]["metadata"]["numbers"]
        assert all(1 <= x <= 20 for x in nums)
        assert json.loads(p.answer)["options"] == {"min_value": 1, "max_value": 20}


@pytest.mark.parametrize("opts, msg", [
    (dict(dataset="gdc"), r"reasoning-gym has no dataset 'gdc'; close matches: gcd"),
    (dict(dataset=""), r"set task_options.dataset"),
    (dict(dataset="gcd", split="train"), r"split must be one of validation, test"),
    (dict(dataset="gcd", dataset_options={"seed": 3}), r"seed is set by the task"),
    (dict(dataset="gcd", dataset_options={"max_vaule": 3}), r"dataset_options for 'gcd': TypeError"),
])
def test_bad_options_are_one_line_errors(opts, msg):
    with pytest.raises(ValueError, match=msg) as e:
        ReasoningGymTask(**opts)
    assert "\n" not in str(e.value)


def test_the_cli_names_close_matches_for_an_unknown_dataset(capsys):
    from rollwise.cli import main

    assert main(["train", "--task", "reasoning-gym", "--set", "task_options.dataset=basic_arithmetc"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "close matches: basic_arithmetic" in err[0]


def test_its_own_verifier_scores_in_a_worker_and_failures_score_zero():
    task = ReasoningGymTask(**SMALL)
    p = task.heldout()[0]
    right = ref(p)
    wrong = str(int(right) + 1)
    scorer = Scorer(task.verify)
    g = Group(p, [Rollout(0, [1], [2], [0.0], t, "eos", 0, "train") for t in (right, f" {right}\n", wrong, "", "x" * 10_000)])
    scorer.score([g])
    assert [r.reward for r in g.rollouts] == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert [r.correct for r in g.rollouts] == [True, True, False, False, False]
    assert task._worker.proc.pid != os.getpid()  # reasoning-gym's code ran in the worker process
    task._worker.proc.kill()  # a worker that dies is replaced at the next call
    task._worker.proc.wait()
    assert task.verify(right, p.answer) == 1.0
    task.close()


def test_answer_tag_reads_the_last_answer_block():
    task = ReasoningGymTask(**SMALL, answer_tag="answer")
    p = task.heldout()[0]
    right = ref(p)
    assert task.verify(f"think... <answer>7</answer> no, <answer>{right}</answer>", p.answer) == 1.0
    assert task.verify(right, p.answer) == 0.0  # no tag
    assert task.sft_distinct()[0][1].startswith("<answer>")  # the warm start writes the tag too
    task.close()


def test_partial_scores_from_the_family_are_kept():
    """The default ProceduralDataset score: len(answer)/len(response) when the response contains it."""
    task = ReasoningGymTask(dataset="basic_arithmetic", pool_size=5, validation_size=3, test_size=0, sft_size=5)
    p = task.heldout()[0]
    right = ref(p)
    import reasoning_gym

    ds = reasoning_gym.create_dataset("basic_arithmetic", seed=0, size=1)
    entry = json.loads(p.answer)["entry"]
    expected = ds.score_answer(right + " ok", {"answer": entry["answer"], "metadata": entry["metadata"]})
    assert task.verify(right + " ok", p.answer) == pytest.approx(expected)
    task.close()


def test_warm_start_and_train_from_the_cli(tmp_path):
    """`rollwise train --task reasoning-gym` builds the tiny model's base (cached) and trains on it; then
    `rollwise eval --set task_options.split=test` evaluates on the test split."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src"), "OMP_NUM_THREADS": "1",
           "ROLLWISE_CACHE": str(tmp_path / "cache")}
    sets = ["task_options.dataset=gcd", "task_options.pool_size=60", "task_options.validation_size=16",
            "task_options.test_size=8", "task_options.sft_size=100", "warmstart.steps=20", "warmstart.n_layer=1",
            "warmstart.n_embd=32", "warmstart.n_head=2", "steps=2", "batch_size=4", "n=4", "eval_every=2"]
    args = [x for s in sets for x in ("--set", s)]
    cli = [sys.executable, "-m", "rollwise.cli"]
    res = subprocess.run(cli + ["train", "--task", "reasoning-gym", "--out", str(tmp_path / "run")] + args,
                         capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "warm start: building the base checkpoint" in res.stdout + res.stderr
    assert len(list((tmp_path / "cache").glob("base-*"))) == 1
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward_mean" in r] == [1, 2]
    res = subprocess.run(cli + ["eval", "--set", "task=reasoning-gym"] + args + ["--set", "task_options.split=test"],
                         capture_output=True, text=True, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1])["prompts"] == 8  # the test split
