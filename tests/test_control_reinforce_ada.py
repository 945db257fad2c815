"""Reinforce-Ada (control/reinforce_ada.py): the exit rule on hand-made reward sequences, the balanced
selection, the rounds and the ledger through the real driver (every round charged, the rows left out
discarded), one-line option errors and refusals, and two steps from the command line on the tiny model."""
import numpy as np
import pytest

from rollwise.control.base import build_planner
from rollwise.control.reinforce_ada import ReinforceAda, balanced_rows, exited
from rollwise.core import registry

from fakes import make_sampled_ctx, run_step


def test_registered():
    e = registry.get("planner", "reinforce-ada")
    assert e.obj is ReinforceAda and "CODE" in e.provenance


def test_exit_rule_on_a_hand_made_reward_sequence():
    """n = 4. Rewards arrive in rounds of 4: (0 0 0 0) (1 0 0 0) (1 0 0 1). After each round (right, wrong) is
    (0, 4), (1, 7), (3, 9): balanced needs 2 right and 2 wrong, so it exits after round 3; positive_focused
    needs one right, so after round 2."""
    rounds = [[0, 0, 0, 0], [1, 0, 0, 0], [1, 0, 0, 1]]
    seen, when = [], {}
    for r, rewards in enumerate(rounds, 1):
        seen += rewards
        right = sum(seen)
        for rule in ("balanced", "positive_focused"):
            if rule not in when and exited(right, len(seen) - right, 4, rule):
                when[rule] = r
    assert when == {"balanced": 3, "positive_focused": 2}
    assert not exited(5, 1, 4, "balanced") and exited(2, 2, 4, "balanced")  # both classes are needed
    assert exited(3, 3, 6, "balanced") and not exited(2, 4, 6, "balanced")
    assert exited(1, 1, 5, "balanced") is False and exited(2, 3, 5, "balanced")  # odd n: 2 right, 3 wrong


def test_balanced_selection_by_hand():
    # 3 right of 7 (rows 2, 4, 5), keep 4: the first two right (2, 4) and the first two wrong (0, 1)
    assert balanced_rows([0, 0, 1, 0, 1, 1, 0], 4) == [0, 1, 2, 4]
    # one right (row 5): it, and three wrong to fill
    assert balanced_rows([0, 0, 0, 0, 0, 1], 4) == [0, 1, 2, 5]
    # one wrong (row 3) of 6: it, and three right to fill
    assert balanced_rows([1, 1, 1, 0, 1, 1], 4) == [0, 1, 2, 3]
    # all right / all wrong: the first four; fewer rows than keep: all of them
    assert balanced_rows([1] * 8, 4) == [0, 1, 2, 3] and balanced_rows([0] * 5, 4) == [0, 1, 2, 3]
    assert balanced_rows([1, 0], 4) == [0, 1]
    # odd keep: 5 // 2 = 2 right, 3 wrong
    assert balanced_rows([1, 1, 1, 0, 0, 0, 0], 5) == [0, 1, 3, 4, 5]


RATES = {0: 0.5, 1: 1 / 16, 2: 0.0, 3: 1.0}  # the scripted engine: prompt 1's rows 15 and 31 are right


def step(rule, **opts):
    ctx, eng = make_sampled_ctx(RATES, B=4, n=4, seed=0)
    planner = build_planner("reinforce-ada", 4, ctx.rng, {"reinforce-ada": {"rule": rule, **opts}})
    batch, rejected, rounds = run_step(planner, ctx, eng)
    return ctx, batch, rejected, rounds


def test_rounds_and_ledger_through_the_driver_balanced():
    """Round size 2n = 8, 4 rounds. Prompt 0 (alternating W C) exits after round 1 (4 right, 4 wrong); prompt 1
    gets its 2nd right row at row 31, so it runs all 4 rounds, as do the all-wrong and all-right prompts 2, 3
    (balanced needs both classes). Rows generated 8 + 3 x 32 = 104, trained 4 x 4, the other 88 discarded."""
    ctx, batch, rejected, rounds = step("balanced")
    assert rounds == [{0: 8, 1: 8, 2: 8, 3: 8}] + [{1: 8, 2: 8, 3: 8}] * 3
    by = {g.prompt.id: g for g in batch.groups}
    assert sorted(by) == [0, 1, 2, 3] and not rejected and all(g.n == 4 for g in batch.groups)
    assert [by[i].num_correct for i in range(4)] == [2, 2, 0, 4]
    assert [by[i].meta["pool_n"] for i in range(4)] == [8, 32, 32, 32]
    assert [by[i].meta["pool_pass_rate"] for i in range(4)] == [0.5, 2 / 32, 0.0, 1.0]
    led = ctx.ledger
    assert led.count_rollouts("train") == 104
    assert led.count_rollouts("train", "trained") == 16 and led.count_rollouts("train", "discarded") == 88
    assert led.count(fate="open") == 0
    assert ctx.metrics["reinforce-ada/mean_generated"] == 104 / 4 and ctx.metrics["reinforce-ada/exited"] == 0.5
    assert ctx.metrics["reinforce-ada/more"] == 3 * 3 * 8


def test_rounds_through_the_driver_positive_focused():
    """One right row is enough: prompts 0 and 3 exit after round 1, prompt 1 after round 2 (row 15), prompt 2
    (never right) runs all 4 rounds. Prompt 1 trains its right row and its first three wrong ones."""
    ctx, batch, _, rounds = step("positive_focused")
    assert rounds == [{0: 8, 1: 8, 2: 8, 3: 8}, {1: 8, 2: 8}, {2: 8}, {2: 8}]
    by = {g.prompt.id: g for g in batch.groups}
    assert [by[i].num_correct for i in range(4)] == [2, 1, 0, 4]
    assert ctx.ledger.count_rollouts("train") == 8 + 16 + 32 + 8


def test_cap_round_size_keep_and_the_zero_variance_filter():
    ctx, batch, rejected, rounds = step("balanced", rounds=2, round_size=3, keep=2, drop_zero_variance=True)
    assert rounds == [{0: 3, 1: 3, 2: 3, 3: 3}, {1: 3, 2: 3, 3: 3}]  # prompt 0 has W C W: one of each
    assert sorted(g.prompt.id for g in batch.groups) == [0] and batch.groups[0].n == 2
    assert sorted(g.prompt.id for g in rejected) == [1, 2, 3]  # never mixed within the 6-row cap
    assert ctx.ledger.count_rollouts("train") == 3 + 3 * 6 and ctx.ledger.count(fate="open") == 0


@pytest.mark.parametrize("bad, words", [
    ({"rule": "pos"}, "rule must be one of balanced, positive_focused, got 'pos'"),
    ({"rounds": 0}, "rounds must be >= 1"),
    ({"round_size": 0}, "round_size must be >= 1"),
    ({"keep": 1}, "keep must be >= 2"),
    ({"drop_zero_variance": "yes"}, "drop_zero_variance must be true or false"),
])
def test_bad_options_are_one_line(bad, words):
    with pytest.raises(ValueError, match="planner_options.reinforce-ada: " + words):
        build_planner("reinforce-ada", 8, np.random.default_rng(0), {"reinforce-ada": bad})


def test_composition():
    """Selectors and down-samplers compose; another component that sets n (a staged sampler too) is refused."""
    rates = {i: [0.0, 1.0, 0.5, 0.25][i % 4] for i in range(16)}
    for spec in ("mopps+reinforce-ada", "greso+reinforce-ada", "reinforce-ada+pods"):
        ctx, eng = make_sampled_ctx(rates, B=4, n=4, seed=2)
        planner = build_planner(spec, 16, ctx.rng)
        for s in range(2):
            ctx.step = s
            batch, _, _ = run_step(planner, ctx, eng, advance_version=True)
            assert batch.groups and all(g.n <= 4 for g in batch.groups), spec
        assert ctx.ledger.count(fate="open") == 0, spec
    for spec, other in (("ar3po+reinforce-ada", "ar3po"), ("reinforce-ada+frontier", "frontier")):
        with pytest.raises(ValueError, match=f"reinforce-ada does not compose with {other}"):
            build_planner(spec, 16, np.random.default_rng(0))


def test_mopps_and_reinforce_ada_from_the_command_line(tmp_path, small_policy):
    """Two steps of `mopps+reinforce-ada` through `rollwise train` on the arithmetic task's tiny policy: both
    components report, and no row is left unsettled."""
    import json

    from rollwise.cli import main

    out = tmp_path / "r"
    assert main(["train", "--task", "arithmetic", "--planner", "mopps+reinforce-ada", "--model", str(small_policy[0]),
                 "--set", "steps=2", "--set", "n=2", "--set", "batch_size=4", "--set", "eval_every=0",
                 "--set", "max_new_tokens=8", "--set", "task_options.pool_size=200",
                 "--set", "task_options.heldout_size=40", "--set", "planner_options.reinforce-ada.rounds=2",
                 "--out", str(out)]) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r["step"] > 0]
    assert len(trained) == 2
    assert all("mopps/sampled_rate" in r and "reinforce-ada/mean_generated" in r for r in trained)
    assert all(4 <= r["reinforce-ada/mean_generated"] <= 8 for r in trained)  # 2n = 4 a round, 2 rounds
