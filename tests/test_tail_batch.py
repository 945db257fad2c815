"""Tail batching (RollPacker; control/tail_batch.py) through the real driver and planner on the scripted
token-by-token engine, hand-checked: which groups train, which wait for a long round, what is charged."""
import numpy as np
import pytest

from rollwise.control.base import build_planner
from rollwise.core.registry import get

from fakes import TokenEngine, make_ctx
from test_partial import lengths_table, step_all


def test_a_short_round_trains_the_first_b_groups_and_queues_the_slow_ones():
    """B = 2, over-provision 1.0 -> 4 prompts with row lengths 3, 4, 12, 16 (max 20): prompts 0 and 1 finish
    first, 2 and 3 are aborted whole, their tokens charged as aborted (none trained, none carried), and their
    prompts queued. The queue then holds a batch: step 2 is a long round of exactly 2 and 3, run to their
    full length from scratch by the policy of step 2 (on-policy: every trained row has one version)."""
    ctx = make_ctx(pool_size=4, B=2, n=2)
    eng = TokenEngine(lengths_table({0: 3, 1: 4, 2: 12, 3: 16}), rates={i: 0.5 for i in range(4)})
    planner = build_planner("tail", 4, ctx.rng, {"tail": {"overprovision": 1.0}})
    (b1,) = step_all(planner, ctx, eng, 1)
    assert sorted(g.prompt.id for g in b1.groups) == [0, 1]
    assert [p.id for p, _ in planner.carry.queue] == [2, 3] and not planner.carry.groups
    led = ctx.ledger
    aborted = led.count(fate="aborted")
    assert aborted > 0 and led.count(fate="carried") == 0 and led.count(fate="open") == 0
    assert led.count(fate="trained") == 2 * 3 + 2 * 4 and led.count() == eng.decoded
    assert ctx.metrics["tail_long_round"] == 0 and ctx.metrics["tail_deferred"] == 2
    assert ctx.metrics["tail_queue"] == 2 and ctx.metrics["tail_deferred_tokens"] == aborted / 4
    (b2,) = step_all(planner, ctx, eng, 1)
    assert ctx.metrics["tail_long_round"] == 1 and not planner.carry.queue
    assert sorted(g.prompt.id for g in b2.groups) == [2, 3]
    assert sorted(r.num_tokens for g in b2.groups for r in g.rollouts) == [12, 12, 16, 16]
    assert all(r.versions_T is None and r.policy_version == 1 for g in b2.groups for r in g.rollouts)
    assert led.count(fate="aborted") == aborted  # nothing more aborted in a long round
    assert led.count() == eng.decoded and led.count(fate="trained") == 14 + 2 * 12 + 2 * 16
    (b3,) = step_all(planner, ctx, eng, 1)  # back to short rounds: the next pass over the pool races again
    assert ctx.metrics["tail_long_round"] == 0 and sorted(g.prompt.id for g in b3.groups) == [0, 1]


def test_queued_prompts_are_not_drawn_again_while_they_wait():
    ctx = make_ctx(pool_size=5, B=2, n=1)
    eng = TokenEngine(lengths_table({0: 3, 1: 3, 2: 18, 3: 3, 4: 3}), rates={i: 0.5 for i in range(5)})
    planner = build_planner("tail", 5, ctx.rng, {"tail": {"overprovision": 0.5}})
    for _ in range(3):
        batch, = step_all(planner, ctx, eng, 1)
        queued = {p.id for p, _ in planner.carry.queue}
        assert not queued & {g.prompt.id for g in batch.groups}


def test_the_queue_survives_a_checkpoint():
    ctx = make_ctx(pool_size=6, B=2, n=2)
    eng = TokenEngine(lengths_table({0: 3, 1: 4, 2: 12, 3: 16, 4: 3, 5: 3}), rates={i: 0.5 for i in range(6)})
    planner = build_planner("tail", 6, ctx.rng, {"tail": {"overprovision": 1.0}})
    step_all(planner, ctx, eng, 1)
    restored = build_planner("tail", 6, np.random.default_rng(0), {"tail": {"overprovision": 1.0}})
    restored.load_state_dict(planner.state_dict())
    assert restored.carry.queue == planner.carry.queue and len(restored.carry.queue) == 2


@pytest.mark.parametrize("spec, message", [
    ("tail+april", r"tail \(TailBatched\) does not compose with april \(Partial\)"),
    ("ar3po+tail", r"tail \(Partial\) does not compose with ar3po \(Staged\): a later stage would need rows"),
])
def test_tail_batching_refuses_what_it_cannot_serve(spec, message):
    with pytest.raises(ValueError, match=message):
        build_planner(spec, 4, np.random.default_rng(0))


def test_bad_overprovision_is_one_line():
    for bad in (0, -1, float("inf")):
        with pytest.raises(ValueError, match="tail: overprovision must be a finite number > 0"):
            get("planner", "tail").obj(overprovision=bad)


def test_tail_from_the_command_line_trains_and_reports_what_it_deferred(tmp_path, small_policy):
    import json

    from rollwise.cli import main

    path = small_policy[0]
    assert main(["train", "--planner", "tail", "--model", str(path), "--steps", "3", "--set", "n=2",
                 "--set", "batch_size=4", "--set", "eval_every=0", "--set", "task_options.pool_size=200",
                 "--set", "task_options.heldout_size=40", "--out", str(tmp_path / "r")]) == 0
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r["step"] > 0]
    assert len(trained) == 3 and all("tail_deferred" in r and "tail_long_round" in r for r in trained)
    assert all(r["batch_groups"] <= 4 for r in trained)
