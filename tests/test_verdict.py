"""The learning verdict (issue 48, item 1): a run says whether held-out accuracy moved beyond its standard error,
what share of its groups taught nothing and why, and what to try. Hand-computed cases: a run that learns, the
issue's run that does not (0.015 -> 0.020 over 200 prompts, 86% of groups all alike), one that sharpens."""
import json
import math

import numpy as np
import pytest

from rollwise.run.verdict import binomial_se, change_se, read_outcomes, run_verdict, verdict

from test_adversarial import cfg_for, one_thread  # noqa: F401  (one_thread: an autouse fixture)


def rows(evals: dict, steps: int = 10, zv: float = 0.2, reward: float = 0.3, entropy=None) -> list[dict]:
    """Metrics rows: a trained row per step (zero-variance share, reward mean, entropy), evaluations at `evals`
    = {step: (accuracy, s.e.)}."""
    out = [{"step": 0, "tokens": 0, "eval_acc": evals[0][0], "eval_se": evals[0][1]}] if 0 in evals else []
    for s in range(1, steps + 1):
        row = {"step": s, "zero_var_frac_gen": zv, "reward_mean": reward, "updated": 1}
        if entropy is not None:
            row["entropy"] = entropy[s - 1]
        if s in evals:
            row.update(eval_acc=evals[s][0], eval_se=evals[s][1])
        out.append(row)
    return out


def test_a_run_that_learns_moved_beyond_two_standard_errors():
    v = verdict(rows({0: (0.40, 0.05), 10: (0.60, 0.05)}))
    assert v.kind == "learns"
    assert v.se == pytest.approx(math.hypot(0.05, 0.05))  # 0.0707: the change, 0.20, is 2.83 s.e.
    assert v.z == pytest.approx(0.2 / 0.070711, rel=1e-4)
    assert v.text() == ("verdict: learning: held-out accuracy 0.400 (step 0) -> 0.600 (step 10), +0.200, beyond 2 "
                        "standard errors (s.e. of the change 0.071, from the two evaluations' binomial s.e., 2.8 s.e.)")


def test_the_issues_run_does_not_learn_and_says_why():
    """Base 0.015, 0.020 after 450 steps, 200 prompts, 86% of groups alike (95 of 100 of them all wrong)."""
    se0, se1 = binomial_se(0.015, 200), binomial_se(0.020, 200)
    assert (round(se0, 5), round(se1, 5)) == (0.0086, 0.0099)
    v = verdict(rows({0: (0.015, se0), 450: (0.020, se1)}, steps=450, zv=0.86, reward=0.02), prompts=200,
                equal=(95, 5))
    assert v.kind == "not learning" and v.se == pytest.approx(0.013111, abs=1e-6)  # the change is 0.38 s.e.
    assert v.text() == (
        "verdict: not learning: held-out accuracy 0.015 (step 0) -> 0.020 (step 450), +0.005, within 2 standard "
        "errors (s.e. of the change 0.013 over 200 prompts, from the two evaluations' binomial s.e., 0.4 s.e.); "
        "86% of groups taught nothing (their rollouts scored alike): the model solves almost none of these "
        "prompts; try easier data or a warm start on this task, a larger n, a higher temperature, or a planner "
        "that skips prompts the model never solves (greso, dapo)")
    # without the trainer's tally, the mean reward says which side the equal groups were on
    assert verdict(rows({0: (0.9, 0.02), 5: (0.9, 0.02)}, steps=5, zv=0.9, reward=0.95)).solved == "all solved"


def test_a_run_that_sharpens_what_it_does():
    ent = [1.0, 1.0, 1.0, 0.8, 0.7, 0.6, 0.6, 0.6]  # early 1.0, recent 0.6: 60% of its start
    v = verdict(rows({0: (0.50, 0.05), 8: (0.52, 0.05)}, steps=8, entropy=ent))
    assert v.kind == "sharpens" and v.entropy == pytest.approx((1.0, 0.6))
    assert "entropy fell 1.00 -> 0.60 (60% of its start): the run sharpens what the model already does; try a " \
           "lower learner.lr" in v.text()
    assert "20% of groups taught nothing (their rollouts scored alike);" in v.text()  # a minority: no cause
    # the issue's entropy fell to 57% of its start and the old warning (below 50%) said nothing: this does
    flat = verdict(rows({0: (0.50, 0.05), 8: (0.52, 0.05)}, steps=8, entropy=[1.0] * 8))
    assert flat.kind == "not learning" and flat.text().endswith("more held-out prompts narrow the standard error")


def test_paired_outcomes_decide_where_the_two_binomial_errors_cannot():
    """20 prompts, 10 solved at first; later the same 10 and 4 more. Paired: the differences are 4 ones and 16
    zeros, s.d. 0.4104, s.e. 0.0918, so +0.20 is 2.18 s.e. Unpaired: hypot(0.1147, 0.1051) = 0.1556, 1.29 s.e."""
    b0 = np.array([1] * 10 + [0] * 10, float)
    b1 = np.array([1] * 14 + [0] * 6, float)
    se0, se1 = b0.std(ddof=1) / math.sqrt(20), b1.std(ddof=1) / math.sqrt(20)
    assert change_se(se0, se1) == (pytest.approx(0.155600, abs=1e-5), False)
    assert change_se(se0, se1, b0, b1) == (pytest.approx(0.091766, abs=1e-5), True)
    r = rows({0: (0.5, se0), 6: (0.7, se1)}, steps=6)
    assert verdict(r).kind == "not learning"
    v = verdict(r, {0: b0, 6: b1})
    assert v.kind == "learns" and v.paired and v.prompts == 20 and "paired per prompt" in v.text()
    assert verdict(r[:3]).kind == "too early"


def test_a_run_directorys_verdict_reads_its_outcomes_file(tmp_path):
    b0 = np.array([1] * 10 + [0] * 10, np.uint8)
    b1 = np.array([1] * 14 + [0] * 6, np.uint8)
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows(
        {0: (0.5, 0.1147), 6: (0.7, 0.1051)}, steps=6)))
    (tmp_path / "eval_outcomes.jsonl").write_text("".join(
        json.dumps({"step": s, "prompts": 20, "greedy": np.packbits(b).tobytes().hex()}) + "\n"
        for s, b in ((0, b0), (6, b1))) + "not json\n")
    assert list(read_outcomes(tmp_path)) == [0, 6]
    assert run_verdict(tmp_path).kind == "learns"


@pytest.mark.parametrize("planner", ["uniform", "ar3po"])
def test_every_planners_run_ends_with_its_verdict_and_says_it_every_five_evaluations(tmp_path, small_policy,
                                                                                       planner):
    from rollwise.run.loop import Trainer

    said = []
    Trainer(cfg_for(tmp_path / "run", steps=6, eval_every=1, planner=planner), log=said.append).run()
    verdicts = [line for line in said if line.startswith("verdict: ")]
    assert len(verdicts) == 2  # after the 5th evaluation after step 0, and at the end
    assert "(step 0) -> " in verdicts[-1] and "(step 6)" in verdicts[-1] and "over 40 prompts, paired per prompt" \
        in verdicts[-1]
    assert "(step 5)" in verdicts[0]
