import json

import pytest

import torch

from rollwise.core.types import Group, Prompt, Rollout
from rollwise.tasks.arithmetic import ArithmeticTask, answer_format, decode_operand
from rollwise.tasks.files import FileTask, load_prompts
from rollwise.tasks.reward import Score, Scorer


def test_arithmetic_is_deterministic_disjoint_and_correct():
    t1, t2 = ArithmeticTask(pool_size=300, heldout_size=100, seed=3), ArithmeticTask(pool_size=300, heldout_size=100, seed=3)
    assert [p.text for p in t1.train_pool()] == [p.text for p in t2.train_pool()]
    assert {p.text for p in t1.train_pool()}.isdisjoint({p.text for p in t1.heldout()})
    assert [p.text for p in ArithmeticTask(pool_size=300, seed=4).train_pool()] != [p.text for p in t1.train_pool()]
    for p in t1.train_pool():
        a, op, b = decode_operand(p.text[:6]), p.text[6], decode_operand(p.text[7:13])
        assert len(str(a)) == p.level or (p.level == 1 and a < 10)
        assert int(p.answer[::-1]) == (a + b if op == "+" else a - b)
    assert t1.verify(" 861", "861") == 1.0 and t1.verify("86", "861") == 0.0


def test_arithmetic_level_weights_set_the_mix():
    t = ArithmeticTask(pool_size=200, level_weights=(0, 0, 0, 0, 0, 1))
    assert {p.level for p in t.train_pool()} == {6}
    with pytest.raises(ValueError, match="level_weights"):
        ArithmeticTask(level_weights=(1, 1))


def test_file_task_jsonl_and_parquet(tmp_path):
    rows = [{"prompt": "12+3=", "answer": "15", "level": 1}, {"prompt": "2+2=", "answer": 4}]
    f = tmp_path / "train.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    ps = load_prompts(f)
    assert [(p.id, p.text, p.answer, p.level) for p in ps] == [(0, "12+3=", "15", 1), (1, "2+2=", "4", -1)]
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist([{"prompt": "1+1=", "answer": "2"}]), tmp_path / "h.parquet")
    t = FileTask(str(f), str(tmp_path / "h.parquet"))
    assert len(t.train_pool()) == 2 and t.heldout()[0].answer == "2" and t.verify("2 ", "2") == 1.0


@pytest.mark.parametrize("line,msg", [
    ('{"prompt": "1+1="}', "row 2: missing field 'answer'"),
    ('{"answer": "2"}', "row 2: missing field 'prompt'"),
    ('{"prompt": "1+1=", "answer": "2"', "row 2: not valid JSON"),
    ('[1, 2]', "row 2: expected a JSON object"),
    ('{"prompt": "", "answer": "2"}', "row 2: field 'prompt' must be a non-empty string"),
])
def test_file_task_malformed_row_names_file_row_field(tmp_path, line, msg):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"prompt": "2+2=", "answer": "4"}\n' + line + "\n")
    with pytest.raises(ValueError) as e:
        load_prompts(f)
    assert str(f) in str(e.value) and msg in str(e.value)


def test_reward_function_that_raises_or_hangs_does_not_kill():
    import time

    s = Scorer("adversarial_rewards:flaky", trusted=False, timeout_s=0.5)  # runs in a worker process
    t0 = time.perf_counter()
    assert s.reward("boom", "x") == 0.0 and s.reward("hang", "x") == 0.0
    assert s.reward("7", "7") == 1.0  # a fresh worker serves after the hang
    assert s.errors == 2 and time.perf_counter() - t0 < 5
    s.close()


# ---- reward components ------------------------------------------------------------------------

def test_arithmetic_reward_parts_are_correctness_and_format():
    t = ArithmeticTask(reward_parts=True)
    assert t.verify(" 861", "861") == {"correct": 1.0, "format": 1.0}
    assert t.verify("862", "861") == {"correct": 0.0, "format": 1.0}  # well formed, wrong
    for bad in ("86", "8610", "86+", "", "\uff18\uff16\uff11"):  # short, long, a non-digit, empty, full-width digits
        assert answer_format(bad, "861") == 0.0, bad
    assert answer_format("1200", "8100") == 1.0  # the answer's width counts its padding zeros
    s = Scorer(t.verify)
    assert s.judge("862", "861") == Score(0.5, False, (0.0, 1.0))  # the mean; correctness from "correct"
    assert s.judge("861", "861") == Score(1.0, True, (1.0, 1.0)) and s.part_names == ("correct", "format")
    w = Scorer(ArithmeticTask(reward_parts=True, reward_weights={"format": 0.2, "correct": 0.8}).verify)
    assert w.part_names == ("format", "correct")  # declared by the task, fixed before any call
    assert w.judge("862", "861") == Score(0.2, False, (1.0, 0.0))
    assert Scorer(ArithmeticTask().verify).judge("861", "861") == Score(1.0, True, None)  # scalar by default
    with pytest.raises(ValueError, match="needs reward_parts"):
        ArithmeticTask(reward_weights={"correct": 1.0, "format": 0.0})
    with pytest.raises(ValueError, match="exactly"):
        ArithmeticTask(reward_parts=True, reward_weights={"correct": 1.0})


def test_scorer_weights_and_the_correct_rule():
    def fn(resp, ans):
        return {"exact": float(resp == ans), "short": float(len(resp) <= 2)}

    s = Scorer(fn)  # no "correct" component: correct = the weighted sum >= 1, here the mean
    assert s.judge("7", "7") == Score(1.0, True, (1.0, 1.0))
    assert s.judge("777", "777") == Score(0.5, False, (1.0, 0.0))
    s = Scorer(fn, weights={"exact": 1.0, "short": 0.5})  # explicit weights: a plain weighted sum
    assert s.judge("777", "777") == Score(1.0, True, (1.0, 0.0)) and s.judge("8", "7").reward == 0.5
    s = Scorer(fn, correct_part="exact")
    assert s.judge("777", "777").correct and not s.judge("8", "7").correct
    flip = Scorer(lambda r, a: {"a": 1.0} if r == "x" else {"b": 1.0})
    assert flip.judge("x", "").parts == (1.0,)  # the first mapping fixes the names
    with pytest.raises(ValueError, match="differ"):  # a trusted verifier's inconsistency is a bug: raise
        flip.judge("y", "")
    declared = lambda r, a: {"q": 1.0, "p": 0.0}  # noqa: E731
    declared.reward_weights = {"p": 3.0, "q": 1.0}  # a user function may declare its weights
    assert Scorer(declared).judge("", "") == Score(1.0, True, (0.0, 1.0))


def _rollout(text):
    return Rollout(0, [1], torch.zeros(1, dtype=torch.long), torch.zeros(1), text, "eos", 0)


def test_untrusted_component_reward_that_raises_hangs_or_changes_shape_scores_zero_parts():
    import time

    s = Scorer("adversarial_rewards:parts", trusted=False, timeout_s=0.5, weights={"correct": 0.75, "short": 0.25})
    t0 = time.perf_counter()
    # the names are known from the weights, so a failure before any success has all its parts
    assert s.judge("boom", "7") == Score(0.0, False, (0.0, 0.0))
    assert s.judge("hang", "7") == Score(0.0, False, (0.0, 0.0))
    assert s.judge("777", "777") == Score(0.75, True, (1.0, 0.0))  # a fresh worker serves after the hang
    assert s.judge("8", "7") == Score(0.25, False, (0.0, 1.0))
    assert s.judge("odd", "7") == Score(0.0, False, (0.0, 0.0)) and s.judge("flat", "7").parts == (0.0, 0.0)
    assert s.errors == 4 and time.perf_counter() - t0 < 5
    s.close()


def test_scorer_fills_zero_parts_of_failures_before_the_names_were_known():
    s = Scorer("adversarial_rewards:parts", trusted=False)
    g = Group(Prompt(0, "q", "7"), [_rollout(t) for t in ("boom", "7", "877")])
    s.score([g])
    assert [r.reward_parts for r in g.rollouts] == [(0.0, 0.0), (1.0, 1.0), (0.0, 0.0)]
    assert [r.reward for r in g.rollouts] == [0.0, 1.0, 0.0] and [r.correct for r in g.rollouts] == [False, True, False]
    assert s.errors == 1
