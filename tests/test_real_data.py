"""Real data: the math-verify reward, the file task's column mapping and answer extraction, chat
templates, the no-variance warning, --reward from the current directory."""
import json

import pytest

from rollwise.run.config import load_config
from rollwise.tasks.reward import Scorer, builtin_reward

math_verify = pytest.importorskip("math_verify")


# ---- --reward math ----------------------------------------------------------------------------------

def test_math_answer_extraction():
    from rollwise.tasks._math_reward import extract

    text = "so \\boxed{\\frac{1}{2}} ... #### 7 and then 3, 1,234 apples"
    assert extract(text, "boxed") == "\\frac{1}{2}"
    assert extract(text, "hashes") == "7 and then 3, 1,234 apples"
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
