"""The testbed task `remainder`: its traces, its verifier and its three splits by data seed."""
import numpy as np
import pytest

from rollwise.tasks.remainder import QUOTIENTS, RemainderTask, final_answer, render


def test_trace_of_a_hand_worked_problem():
    # 47 - 6 repeatedly: 41 35 29 23 17 11 5, digits reversed as in the arithmetic task
    assert render(47, 6) == ("74-6=", "14,53,92,32,71,11,5:5", "5")
    # a borrow through a zero: 101 - 2 = 99; 100 - 3 = 97 ...
    assert render(101, 2)[1].split(",")[:2] == ["99", "79"]
    assert render(7, 3) == ("7-3=", "4,1:1", "1")


def test_trace_check_scores_only_the_exact_worked_trace():
    t = RemainderTask()  # check="trace" by default
    prompt, trace, ans = render(47, 6)
    assert t.verify(trace, trace) == 1.0 and t.verify(trace + " ", trace) == 1.0
    assert t.verify("14,53,92,32,71,11,6:5", trace) == 0.0  # a slip with the right remainder scores 0
    assert t.verify(trace[:-1] + "4", trace) == 0.0
    assert all(p.answer.endswith(":" + str(int(p.text.split("-")[0][::-1]) % int(p.text.split("-")[1][:-1])))
               for p in t.heldout())
    with pytest.raises(ValueError, match="task_options.check"):
        RemainderTask(check="both")


def test_answer_check_reads_only_the_final_answer():
    t = RemainderTask(check="answer")
    assert t.verify("14,53:5", "5") == 1.0
    assert t.verify("wrong trace:5", "5") == 1.0  # the trace is free
    assert t.verify("14,53,5", "5") == 0.0  # no marker
    assert t.verify("5:4", "5") == 0.0
    assert final_answer("a:b:3 ") == "3"


def test_levels_set_the_number_of_subtractions():
    t = RemainderTask(pool_size=300, check="answer")
    for p in t.train_pool():
        lo, hi = QUOTIENTS[p.level - 1]
        a = int(p.text.split("-")[0][::-1])
        d = int(p.text.split("-")[1].rstrip("="))
        assert lo <= a // d <= hi and str(a % d) == p.answer


def test_splits_are_disjoint_and_never_warm_start_targets():
    t = RemainderTask(pool_size=800, validation_size=150, test_size=150)
    train = {p.text for p in t.train_pool()}
    val = {p.text for p in t.split_prompts("validation")}
    test = {p.text for p in t.split_prompts("test")}
    assert len(val) == 150 and len(test) == 150 and len(train) == 800
    assert not (train & val) and not (train & test) and not (val & test)
    sft = {text for text, _, _ in t.sft_examples(5000, seed=10_000)}
    assert not (sft & (val | test))
    assert {p.text for p in t.heldout()} == val
    assert {p.text for p in RemainderTask(split="test", validation_size=150, test_size=150).heldout()} == test


def test_held_out_splits_do_not_depend_on_the_pool_size_and_move_with_the_data_seed():
    a, b = RemainderTask(pool_size=100), RemainderTask(pool_size=1500)
    assert [p.text for p in a.heldout()] == [p.text for p in b.heldout()]
    c = RemainderTask(data_seed=1)
    overlap = {p.text for p in a.heldout()} & {p.text for p in c.heldout()}
    assert len(overlap) < 40  # another draw (level 1 has only 132 prompts, so some repeat)


def test_bad_options_are_one_line_errors():
    with pytest.raises(ValueError, match="task_options.split"):
        RemainderTask(split="train")
    with pytest.raises(ValueError, match="level_weights"):
        RemainderTask(level_weights=(1, 1))
    with pytest.raises(ValueError, match="pool_size"):
        RemainderTask(pool_size=0)


def test_length_profile_meets_the_testbed_bar():
    """Bench 3.0 asks for p50 >= 50 tokens and p99/p50 >= 3 (a correct trace, one token per char)."""
    lens = np.array([len(r) + 1 for _, r, _ in RemainderTask().sft_examples(3000, seed=1)])
    p50, p99 = np.median(lens), np.percentile(lens, 99)
    assert p50 >= 50 and p99 / p50 >= 3 and lens.max() < RemainderTask.max_new_tokens
