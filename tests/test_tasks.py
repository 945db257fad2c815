import json

import pytest

from rollwise.tasks.arithmetic import ArithmeticTask, decode_operand
from rollwise.tasks.files import FileTask, load_prompts
from rollwise.tasks.reward import Scorer


def test_arithmetic_is_deterministic_disjoint_and_correct():
    t1, t2 = ArithmeticTask(pool_size=300, heldout_size=100, seed=3), ArithmeticTask(pool_size=300, heldout_size=100, seed=3)
    assert [p.text for p in t1.train_pool()] == [p.text for p in t2.train_pool()]
    assert {p.text for p in t1.train_pool()}.isdisjoint({p.text for p in t1.heldout()})
    assert [p.text for p in ArithmeticTask(pool_size=300, seed=4).train_pool()] != [p.text for p in t1.train_pool()]
    for p in t1.train_pool():
        a, op, b = decode_operand(p.text[:6]), p.text[6], decode_operand(p.text[7:13])
        assert len(str(a)) == p.level or (p.level == 1 and a < 10)
        assert int(p.answer[::-1]) == (a + b if op == "+" else a - b)
    assert ArithmeticTask.verify(" 861", "861") == 1.0 and ArithmeticTask.verify("86", "861") == 0.0


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

    def flaky(resp, ans):
        if resp == "boom":
            raise RuntimeError("bad reward")
        if resp == "hang":
            time.sleep(5)
        return 1.0 if resp == ans else 0.0

    s = Scorer(flaky, trusted=False, timeout_s=0.2)
    t0 = time.perf_counter()
    assert s.reward("boom", "x") == 0.0 and s.reward("hang", "x") == 0.0
    assert s.reward("7", "7") == 1.0  # a fresh worker serves after the hang
    assert s.errors == 2 and time.perf_counter() - t0 < 3
