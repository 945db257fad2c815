"""Real data: the math-verify reward, the file task's column mapping and answer extraction, chat
templates, the no-variance warning, --reward from the current directory."""
import json

import pytest

from rollwise.run.config import load_config
from rollwise.tasks.reward import Scorer, builtin_reward

math_verify = pytest.importorskip("math_verify")


# ---- --reward math ----------------------------------------------------------------------------------

def test_math_answer_extraction():
    from rollwise.tasks._answers import extract

    text = "so \\boxed{\\frac{1}{2}} ... #### 7 and then 3, 1,234 apples"
    assert extract(text, "boxed") == "\\frac{1}{2}"
    assert extract(text, "####") == "7 and then 3, 1,234 apples"
    assert extract(text, "number") == "1,234"
    assert extract(text, "auto") == "\\frac{1}{2}"  # boxed first
    assert extract("#### 42", "auto") == "42" and extract("it is 5, not -3.5", "auto") == "-3.5"
    assert extract("\\boxed{a{b}c} then \\boxed{x^{2}}", "boxed") == "x^{2}"  # the last, braces matched
    assert extract("\\boxed{1/2", "boxed") is None and extract("no answer", "auto") is None


@pytest.mark.parametrize("how,response,answer,reward", [
    ("auto", "The answer is \\boxed{1/2}.", "0.5", 1.0),
    ("auto", "The answer is \\boxed{\\frac{1}{2}}.", "1/2", 1.0),
    ("auto", "steps...\n#### 42", "42", 1.0),
    ("auto", "she has 3 + 4 = 7 apples", "7", 1.0),
    ("auto", "\\boxed{1/3}", "0.5", 0.0),  # wrong
    ("auto", "#### 41", "42", 0.0),
    ("number", "1,234 apples", "1234", 1.0),
    ("boxed", "the answer is 42", "42", 0.0),  # no \boxed: nothing to check
    ("####", "#### 42", "42", 1.0),
    ("####", "42", "42", 0.0),
    ("auto", "}{\\boxed{\\frac{", "1", 0.0),  # garbage
    ("auto", "\\boxed{}}}}\\\\$$", "1", 0.0),
    ("auto", "\\boxed{2}", "not math at all ###", 0.0),  # a reference it cannot parse
    ("auto", "", "1", 0.0),
])
def test_math_reward_hand_cases(how, response, answer, reward):
    from rollwise.tasks import _math_reward

    spec, _ = builtin_reward("math", {"extract": how})
    assert getattr(_math_reward, spec.split(":")[1])(response, answer) == reward


def test_math_reward_runs_in_the_worker_and_never_fails():
    spec, path = builtin_reward("math", {})
    s = Scorer(spec, trusted=False, timeout_s=30, path=path)
    try:
        scores = s.judge_many([("\\boxed{1/2}", "0.5"), ("#### 42", "42"), ("\\frac{", "1"), ("7", "8"),
                               ("\x00\\boxed{" * 50, "1")])
        assert [x.reward for x in scores] == [1.0, 1.0, 0.0, 0.0, 0.0]
        assert s.errors == 0  # a parse failure is a wrong answer, not a reward error
        assert "rollwise" not in s.worker.spec  # imported as a top-level module: the worker never imports torch
    finally:
        s.close()


def test_math_reward_options_are_checked_at_load():
    assert load_config(None, {"reward": "math", "reward_options": {"extract": "####"}}).reward == "math"
    with pytest.raises(ValueError, match="reward_options.extract must be one of auto, boxed, ####, number"):
        load_config(None, {"reward": "math", "reward_options": {"extract": "last"}})
    with pytest.raises(ValueError, match="reward_options: unknown key 'strict'"):
        load_config(None, {"reward": "math", "reward_options": {"strict": True}})
    with pytest.raises(ValueError, match="only the built-in reward 'math' takes options"):
        load_config(None, {"reward": "mymod:fn", "reward_options": {"extract": "boxed"}})
    with pytest.raises(ValueError, match="'module:function' or 'math'"):
        load_config(None, {"reward": "maths"})


# ---- the file task: column mapping, answer extraction, saved datasets ---------------------------------

GSM8K_ROWS = [{"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
              {"question": "What is 6 times 7?", "answer": "6 * 7 = 42\n#### 42"}]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_file_task_maps_columns_and_extracts_answers(tmp_path):
    from rollwise.tasks.files import FileTask

    f = _jsonl(tmp_path / "gsm.jsonl", GSM8K_ROWS)
    t = FileTask(f, f, prompt_field="question", answer_field="answer", answer_extract="####")
    assert [(p.text, p.answer) for p in t.train_pool()] == [(GSM8K_ROWS[0]["question"], "7"),
                                                            (GSM8K_ROWS[1]["question"], "42")]
    b = _jsonl(tmp_path / "math.jsonl", [{"problem": "1/2 + 1/2?",
                                          "solution": "so \\boxed{\\frac{2}{2}} = \\boxed{1}"}])
    assert FileTask(b, b, prompt_field="problem", answer_field="solution",
                    answer_extract="boxed").heldout()[0].answer == "1"


NO_ANSWER = "row 1: field 'answer' has no answer after"


@pytest.mark.parametrize("rows,opts,msg", [
    ([{"question": "q", "answer": "no marker"}], {"answer_extract": "####"}, f"{NO_ANSWER} '####'"),
    ([{"question": "q", "answer": "x ####  "}], {"answer_extract": "####"}, f"{NO_ANSWER} '####'"),
    ([{"question": "q", "answer": "\\boxed{1"}], {"answer_extract": "boxed"}, f"{NO_ANSWER} '\\boxed{{...}}'"),
    ([{"prompt": "q", "answer": "1"}], {}, "row 1: missing field 'question'"),
    ([{"question": "q", "answer": "#### 1"}], {"answer_extract": "last"}, "answer_extract must be one of none, ####"),
])
def test_file_task_mapping_errors_name_file_row_field(tmp_path, rows, opts, msg):
    from rollwise.tasks.files import FileTask

    f = _jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError) as e:
        FileTask(f, f, prompt_field="question", **opts)
    assert msg in str(e.value)


def test_file_task_reads_a_saved_dataset_directory(tmp_path):
    datasets = pytest.importorskip("datasets")
    from rollwise.tasks.files import FileTask

    d = datasets.DatasetDict({"train": datasets.Dataset.from_list(GSM8K_ROWS),
                              "test": datasets.Dataset.from_list(GSM8K_ROWS[:1])})
    d.save_to_disk(str(tmp_path / "gsm8k"))
    t = FileTask(str(tmp_path / "gsm8k" / "train"), str(tmp_path / "gsm8k" / "test"), prompt_field="question",
                 answer_extract="####")
    assert [p.answer for p in t.train_pool()] == ["7", "42"] and len(t.heldout()) == 1
    with pytest.raises(ValueError, match="holds the splits train, test; name one split's directory"):
        FileTask(str(tmp_path / "gsm8k"), str(tmp_path / "gsm8k"), prompt_field="question")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="empty: not a dataset saved with save_to_disk"):
        FileTask(str(tmp_path / "empty"), str(tmp_path / "empty"))
    datasets.Dataset.from_list([{"question": "q", "answer": None}]).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(ValueError, match="bad: row 1: missing field 'answer'"):
        FileTask(str(tmp_path / "bad"), str(tmp_path / "bad"), prompt_field="question")
